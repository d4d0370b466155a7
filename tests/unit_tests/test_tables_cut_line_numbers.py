"""A status that names a cut iteration line names its line number in the log file, so that the user can look at
what cut it; a line missing altogether has none and reads 'missing or cut' as before. Fresh random step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: 2026-11-30 12:00:00.000000 "


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, log interval 1."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "log_interval": 1})


def _lines(args: dict) -> list[str]:
    """The arguments block, a setup message and iteration lines 1-10 of 10 (fresh random times)."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    return [*args_block(args), "> building datasets ...",
            *(iteration_line(i, 10, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
              for i, ms in enumerate(times, start=1))]


def _number(lines: list[str], iteration: int) -> int:
    """The 1-based line number of ``iteration``'s line."""
    return 1 + next(k for k, line in enumerate(lines) if f"iteration {iteration:8d}/" in line)


def test_a_cut_line_in_the_window_is_named_with_its_line_number(args):
    lines, cut = _lines(args), random.randint(3, 9)
    number = _number(lines, cut)
    lines[number - 1] = lines[number - 1][:random.randint(70, 200)]
    status = summarise(parse_log_text("\n".join([*lines, DONE])), Window(), 4).status
    assert status == f"no line for iteration {cut} of the window 3-10 (the line of iteration {cut} is cut: line {number})"


def test_a_missing_line_has_no_line_number(args):
    lines, missing = _lines(args), random.randint(3, 9)
    del lines[_number(lines, missing) - 1]
    status = summarise(parse_log_text("\n".join([*lines, DONE])), Window(), 4).status
    assert status == f"no line for iteration {missing} of the window 3-10 (missing or cut)"


def test_a_truncated_log_names_its_cut_last_line(args):
    lines, last = _lines(args), random.randint(4, 9)
    number = _number(lines, last)
    text = "\n".join(lines[:number - 1] + [lines[number - 1][:random.randint(70, 200)]])
    assert summarise(parse_log_text(text), Window(), 4).status == \
        f"truncated at iteration {last - 1}/10 (the line of iteration {last} is cut: line {number})"
    assert summarise(parse_log_text("\n".join(lines[:number - 1])), Window(), 4).status == \
        f"truncated at iteration {last - 1}/10"
