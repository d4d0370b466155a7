"""A run SLURM stopped once the window's last iteration line was printed whole keeps its numbers: the whole line
shows the iteration completed. Window 3-10 of a 10-iteration run killed by the time limit in its final checkpoint
save read ``cancelled (time limit) at iteration 10``, though README and ``--help`` said "after a whole window". A
cut last line is no whole line and gives no numbers. Fresh random step times and cut points."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

STAMP = "2026-11-30T12:00:00"
STOPS = {
    f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} DUE TO TIME LIMIT ***": "cancelled (time limit)",
    f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} ***": "cancelled",
    f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} DUE TO PREEMPTION ***": "cancelled (preemption)",
}
SAVE = " saving checkpoint at iteration      10 to /scratch/ckpt in torch_dist format"
RULE = ("a run SLURM stopped (its time limit, scancel, a preemption or a requeue) once the line of the window's last "
        "iteration was printed whole keeps its numbers")
"""The rule as README and ``oellm table --help`` state it."""


def _log(total: int, last: int, tail: list[str], interval: int = 1) -> tuple[str, dict[int, float]]:
    """Arguments of a run of ``total`` iterations, lines at 1 and every multiple of ``interval`` up to ``last``
    (fresh random times), then ``tail``; and the times by iteration."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": total,
                                                           "log_interval": interval})
    logged = sorted({1, *range(interval, last + 1, interval)})
    times = dict(zip(logged, random_times(len(logged), random.uniform(60_000.0, 90_000.0)), strict=True))
    lines = [*args_block(args), "> building datasets ..."]
    lines += [iteration_line(i, total, args["global_batch_size"], ms, 130.0) for i, ms in times.items()]
    return "\n".join(lines + tail) + "\n", times


@pytest.mark.parametrize("message", STOPS)
def test_a_stop_during_the_final_save_keeps_the_numbers(message):
    text, times = _log(10, 10, [SAVE, message])
    row = summarise(parse_log_text(text), Window(), 4)
    assert row.status == f"ok ({STOPS[message]} at iteration 10, after the window)"
    assert row.step_time_s == pytest.approx(statistics.median(times[i] for i in range(3, 11)) / 1000, rel=1e-12)


def test_a_stop_right_after_the_windows_last_line_of_a_longer_run_keeps_the_numbers():
    last = random.randint(10, 40)
    text, _ = _log(1000, last, [next(iter(STOPS))])
    row = summarise(parse_log_text(text), Window(3, last), 4)
    assert row.status == f"ok (cancelled (time limit) at iteration {last}, after the window)" and row.ok


def test_with_a_log_interval_the_windows_own_last_line_is_enough():
    """Log interval 5, window 6-10: stopped before the line of 15, after the whole line of 10."""
    text, _ = _log(1000, random.randint(10, 14), [next(iter(STOPS))], interval=5)
    assert summarise(parse_log_text(text), Window(6, 10), 4).status == \
        "ok (cancelled (time limit) at iteration 10, after the window)"


def test_a_cut_last_line_is_not_whole():
    """The line of 10 cut by the kill (before its last field): iteration 10's line is no proof; no numbers."""
    text, _ = _log(10, 10, [])
    lines = text.splitlines()
    lines[-1] = lines[-1][:random.randint(40, lines[-1].index("number of nan iterations") + 20)]
    row = summarise(parse_log_text("\n".join([*lines, next(iter(STOPS))]) + "\n"), Window(), 4)
    assert row.status == "cancelled (time limit) at iteration 9" and row.step_time_s is None


def test_a_stop_before_the_windows_last_line_gives_no_numbers():
    last = random.randint(3, 9)
    text, _ = _log(1000, last, [next(iter(STOPS))])
    assert summarise(parse_log_text(text), Window(), 4).status == f"cancelled (time limit) at iteration {last}"


def test_the_help_states_the_rule(capsys):
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    assert RULE in " ".join(capsys.readouterr().out.split())
