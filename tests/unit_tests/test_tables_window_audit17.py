"""Tests from a seventeenth mutation audit of the window a table row reads (:mod:`megatron.oellm.scaling_table.window`):
a window whose only line is cut names that line. Fresh random step times, sizes and iterations."""

from __future__ import annotations

import random

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: 2026-12-06 12:00:00.000000 "


def _args(**overrides: object) -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe with ``overrides``."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **overrides})


def _start(args: dict, logged: list[int], tail: list[str]) -> list[str]:
    """One start of the program: its arguments block, lines at the ``logged`` iterations (fresh random times), then
    ``tail``."""
    times = random_times(max(len(logged), 2), random.uniform(60_000.0, 90_000.0))
    lines = [iteration_line(i, args["train_iters"], args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
             for i, ms in zip(logged, times, strict=False)]
    return [*args_block(args), "> building datasets ...", *lines, *tail]


def _status(lines: list[str], window: Window) -> str:
    """The row's status of a log of ``lines``."""
    return summarise(parse_log_text("\n".join(lines) + "\n"), window, 4).status


def test_a_window_whose_only_line_is_cut_names_the_cut_line():
    """Log interval N, window 3-N: the line of iteration N is the window's only one, and another rank's output cut
    into it. The row named the log interval and asked for a window ending on a logged iteration, which 3-N already
    does; it names the cut line (its number in the file) instead."""
    interval = random.randint(4, 10)
    lines = _start(_args(train_iters=3 * interval, log_interval=interval),
                   [1, interval, 2 * interval, 3 * interval], [DONE])
    index = next(k for k, line in enumerate(lines) if f"iteration {interval:8d}/" in line)
    lines[index] = lines[index][:lines[index].index("| elapsed time")] + "[rank3]: WARNING"
    assert _status(lines, Window(3, interval)) == (f"no whole iteration line in the window 3-{interval}: the line of "
                                                   f"iteration {interval} is cut: line {index + 1}")
