"""``oellm table`` on a run SLURM ended after a clean, whole window (its time limit, ``scancel``, a preemption): the
row keeps the window's numbers, as the same run ended by ``--exit-interval`` does, and its status still says how
the job ended. So does a failure of the run itself after the window (its status names the failure); a stop or
failure inside it still gives no numbers. Fresh
random step times."""

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
    f"slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT {STAMP} DUE TO TIME LIMIT ***": "cancelled (time limit)",
    f"slurmstepd: error: *** STEP 1234.0 ON as01r1b01 CANCELLED AT {STAMP} ***": "cancelled",
    f"slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT {STAMP} DUE TO PREEMPTION ***": "cancelled (preemption)",
}
"""slurmstepd's messages of a job it ended for no fault of the run, with the failure each names."""


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 1000})


def _log(args: dict, last: int, tail: list[str], interval: int = 1) -> tuple[str, dict[int, float]]:
    """The arguments block, lines at 1 and every multiple of ``interval`` up to ``last`` (fresh random times), then
    ``tail``; and the times by iteration."""
    logged = sorted({1, *range(interval, last + 1, interval)})
    times = dict(zip(logged, random_times(len(logged), random.uniform(60_000.0, 90_000.0)), strict=True))
    lines = [*args_block({**args, "log_interval": interval}), "> building datasets ..."]
    lines += [iteration_line(i, 1000, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
              for i, ms in times.items()]
    return "\n".join(lines + tail) + "\n", times


def _row(text: str, window: Window):
    """The table's row of a log's text (the note on how the job ended included)."""
    log = parse_log_text(text)
    return summarise(log, window, 4)


@pytest.mark.parametrize("message", STOPS)
def test_a_stop_from_outside_after_the_window_keeps_the_numbers(args, message):
    last = random.randint(11, 40)
    text, times = _log(args, last, [message])
    row = _row(text, Window())
    assert row.status == f"ok ({STOPS[message]} at iteration {last}, after the window)"
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[i] for i in range(3, 11)) / 1000,
                                                       rel=1e-12)
    assert summarise(parse_log_text(text), Window(), 4).ok


def _numbers(row) -> tuple:
    """The row's numbers."""
    return row.step_time_s, row.tokens_per_s_per_gpu, row.tflops_per_gpu, row.tflops_per_gpu_logged, row.mfu


def test_the_row_reads_as_the_same_run_ended_by_exit_interval(args):
    """The same lines ended by SLURM's time limit or by ``--exit-interval``: the same numbers."""
    text, _ = _log(args, 30, [next(iter(STOPS))])
    exited = text.replace(next(iter(STOPS)), "[exiting program at iteration 30] datetime: 2026-11-30 12:00:00 ")
    cancelled, ended = _row(text, Window()), _row(exited, Window())
    assert ended.status == "ok" and cancelled.ok
    assert None not in _numbers(cancelled) and _numbers(cancelled) == _numbers(ended)


@pytest.mark.parametrize("message", STOPS)
def test_a_stop_inside_the_window_gives_no_numbers(args, message):
    """The run's last whole line is before the window's last iteration (a stop right after the window's last line
    keeps the numbers: test_tables_stop_right_after_the_window.py)."""
    inside = random.randint(3, 9)
    text, _ = _log(args, inside, [message])
    assert _row(text, Window()).status == f"{STOPS[message]} at iteration {inside}"


@pytest.mark.parametrize("tail, status", [
    (["[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."], "out of memory"),
    (["Traceback (most recent call last):", '  File "train.py", line 1, in <module>', "RuntimeError: boom"],
     "crashed (RuntimeError: boom)"),
    ([f"slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT {STAMP} DUE TO NODE FAILURE, SEE SLURMCTLD LOG "
      "FOR DETAILS ***"], "cancelled (node failure)"),
    (["srun: error: as01r1b01: task 3: Out Of Memory"], "task 3 out of memory (srun)"),
])
def test_a_failure_of_the_run_after_the_window_keeps_the_numbers_and_is_named(args, tail, status):
    last = random.randint(11, 40)
    text, _ = _log(args, last, tail)
    row = _row(text, Window())
    assert row.status == f"ok ({status} at iteration {last}, after the window)" and row.step_time_s > 0
    assert _row(text, Window(3, last + 1)).status == f"{status} at iteration {last}"


def test_with_a_log_interval_the_windows_last_line_must_be_whole(args):
    """Log interval 5, window 6-10: the line of 15 after the window's line of 10 gives the numbers; window 16-20
    has no whole line of its last iteration."""
    text, _ = _log(args, 15, [next(iter(STOPS))], interval=5)
    assert _row(text, Window(6, 10)).status == "ok (cancelled (time limit) at iteration 15, after the window)"
    assert _row(text, Window(16, 20)).status == "cancelled (time limit) at iteration 15"


def test_the_table_counts_the_row_as_having_numbers(args, tmp_path, capsys):
    """Markdown and CSV carry the row's numbers and status; it can be the baseline and is sorted with the ok rows."""
    cancelled, _ = _log(args, 30, [next(iter(STOPS))])
    crashed, _ = _log(args, 8, ["[rank3]: torch.OutOfMemoryError: CUDA out of memory."])
    (tmp_path / "a_crashed.log").write_text(crashed)
    (tmp_path / "b_cancelled.log").write_text(cancelled)
    logs = [str(tmp_path / "a_crashed.log"), str(tmp_path / "b_cancelled.log")]
    assert main(["table", *logs, "--baseline-row", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if ".log |" in line]
    assert len(rows) == 2 and rows[0].startswith("| 8 | 32 | 4096 |")
    assert rows[0].endswith("| ok (cancelled (time limit) at iteration 30, after the window) |")
    assert "| 100.0% |" in rows[0] and "| out of memory at iteration 8 |" in rows[1]
    assert main(["table", *logs, "--format", "csv"]) == 0
    csv_rows = capsys.readouterr().out.splitlines()
    assert csv_rows[1].startswith(f"{logs[1]},qwen3.5-35b-a3b,\"ok (cancelled (time limit) at iteration 30, after "
                                  "the window)\",8,32,4096,")
