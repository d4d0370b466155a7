"""srun prints SLURM's ``CANCELLED`` message (stderr) as it comes, while the last rank's stdout may still hold the
line of the window's last iteration: with ``2>&1`` the message can precede that line in the log. The line, once
printed whole, still shows the iteration completed, so the run keeps its numbers, as it does with the message after
it. Fresh random step times; the statistic checked against :func:`statistics.median` over the window."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

CANCELLED = "slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT 2026-11-30T12:00:00 DUE TO TIME LIMIT ***"


def _log(last: int, interval: int) -> tuple[str, dict[int, float]]:
    """A 1000-iteration run's log with lines at 1 and every multiple of ``interval`` up to ``last``, SLURM's
    cancellation printed just before the line of ``last``; and the times by iteration."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 1000,
                                                           "log_interval": interval})
    logged = sorted({1, *range(interval, last + 1, interval)})
    times = dict(zip(logged, random_times(len(logged), random.uniform(60_000.0, 90_000.0)), strict=True))
    lines = [*args_block(args), "> building datasets ..."]
    lines += [iteration_line(i, 1000, args["global_batch_size"], ms, 130.0) for i, ms in times.items()]
    lines.insert(len(lines) - 1, CANCELLED)
    return "\n".join(lines) + "\n", times


@pytest.mark.parametrize(("interval", "first", "last"), [(1, 3, random.randint(10, 30)), (5, 6, 10)])
def test_a_cancellation_printed_before_the_windows_last_line_keeps_the_numbers(interval: int, first: int,
                                                                               last: int) -> None:
    text, times = _log(last, interval)
    row = summarise(parse_log_text(text), Window(first, last), 4)
    assert row.status == f"ok (cancelled (time limit) at iteration {last}, after the window)"
    window = [ms for iteration, ms in times.items() if first <= iteration <= last]
    assert row.step_time_s == pytest.approx(statistics.median(window) / 1000, rel=1e-12)


def test_a_cancellation_before_a_line_short_of_the_window_gives_no_numbers() -> None:
    last = random.randint(10, 30)
    text, _ = _log(last - 1, 1)
    row = summarise(parse_log_text(text), Window(3, last), 4)
    assert not row.ok and row.status.startswith("cancelled (time limit)")
