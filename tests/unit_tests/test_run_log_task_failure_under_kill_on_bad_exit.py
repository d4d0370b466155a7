"""A rank that crashes under ``srun --kill-on-bad-exit=1`` (every recipe job uses it) makes srun end the step:
``srun: error: ...: task N: Exited with exit code 1``, ``srun: Terminating StepId=...``, then slurmstepd's ``***
STEP ... CANCELLED AT ... ***`` without a reason. That cancellation is the task's failure, not an outside stop: the
row read ``ok (cancelled at iteration 30, after the window)``; it names the task's failure (and keeps its numbers
when the failure came after the window's last line). A reasonless cancellation that
follows no task failure (``scancel``) still keeps them. Fresh random iterations, tasks, ranks and exit codes."""

from __future__ import annotations

import random
import signal

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

STAMP = "2026-11-30T12:00:00"
STEP_CANCELLED = f"slurmstepd: error: *** STEP 1234.0 ON gs01r1b01 CANCELLED AT {STAMP} ***"
TERMINATING = "srun: Terminating StepId=1234.0"
SIGNALS = (signal.SIGBUS, signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL)


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return eight_node_strong_args()


def _srun_failed(task: int, how: str) -> str:
    """srun's report of a task that failed."""
    return f"srun: error: gs01r1b02: task {task}: {how}"


def _torchrun_report(rank: int, exitcode: int) -> list[str]:
    """torchrun's ``ChildFailedError`` report of a rank that ended with ``exitcode`` (negative: a signal)."""
    cause = (f"Signal {-exitcode} ({signal.Signals(-exitcode).name}) received by PID 2350" if exitcode < 0
             else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    return [f"E1130 12:00:00.123000 2345 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: "
            f"{exitcode}) local_rank: {rank % 4} (pid: 2350) of binary: /usr/bin/python3",
            "Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60, "megatron.oellm.training.entry FAILED", "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>",
            "-" * 60, "Root Cause (first observed failure):", "[0]:", f"  time      : {STAMP}",
            "  host      : gs01r1b02", f"  rank      : {rank} (local_rank: {rank % 4})",
            f"  exitcode  : {exitcode} (pid: 2350)", "  error_file: <N/A>", f"  traceback : {cause}", "=" * 60]


def _row(text: str):
    """The table's row of a log's text at the default window."""
    return summarise(parse_log_text(text), Window(), 4)


def _status(failure: str, last: int) -> str:
    """The status of a row whose run failed with ``failure`` after its line of iteration ``last``: the numbers are kept
    when that line ends the default window 3-10 or comes after it."""
    return f"ok ({failure} at iteration {last}, after the window)" if last >= 10 else f"{failure} at iteration {last}"


def test_a_task_that_exited_with_an_error_is_named_not_a_cancellation(args):
    last, task, code = random.randint(11, 40), random.randint(0, 7), random.randint(1, 255)
    tail = [_srun_failed(task, f"Exited with exit code {code}"), TERMINATING, STEP_CANCELLED,
            _srun_failed((task + 1) % 8, "Terminated"), "srun: Force Terminated StepId=1234.0"]
    row = _row(log_then(args, last, tail))
    assert row.status == _status(f"task {task} exited with exit code {code} (srun)", last)
    assert row.ok and row.step_time_s > 0 and row.tokens_per_s_per_gpu > 0


@pytest.mark.parametrize("how", ["Bus error", "Killed", "Aborted", "Out Of Memory"])
def test_a_task_ended_by_a_signal_is_named(args, how):
    last, task = random.randint(11, 40), random.randint(0, 7)
    row = _row(log_then(args, last, [_srun_failed(task, how), TERMINATING, STEP_CANCELLED]))
    assert row.status == _status(f"task {task} {how.lower()} (srun)", last)


def test_torchruns_report_of_a_rank_killed_by_a_signal_names_the_rank_and_signal(args):
    """The reviewer's case: a rank died of SIGBUS, torchrun exits 1, srun ends the step."""
    last, rank, sig = random.randint(11, 40), random.randint(0, 31), random.choice(SIGNALS)
    task = rank // 4
    tail = [*_torchrun_report(rank, -sig), _srun_failed(task, "Exited with exit code 1"), TERMINATING, STEP_CANCELLED]
    row = _row(log_then(args, last, tail))
    assert row.status == _status(f"task {task} exited with exit code 1 (srun; torchrun: rank {rank} exitcode {-sig}, "
                                 f"{sig.name})", last)


@pytest.mark.parametrize("exitcode", ["signal", "error"])
def test_torchruns_report_alone_names_the_rank(args, exitcode):
    """A per-task output file may lack srun's line: torchrun's report before the reasonless cancel says enough."""
    last, rank = random.randint(11, 40), random.randint(0, 31)
    code = -random.choice(SIGNALS) if exitcode == "signal" else random.randint(1, 255)
    named = f"exitcode {code}, {signal.Signals(-code).name}" if code < 0 else f"exitcode {code}"
    row = _row(log_then(args, last, [*_torchrun_report(rank, code), STEP_CANCELLED]))
    assert row.status == _status(f"task failed (torchrun: rank {rank} {named})", last)


def test_srun_terminating_the_step_alone_is_a_task_failure(args):
    last = random.randint(3, 40)
    row = _row(log_then(args, last, [TERMINATING, STEP_CANCELLED]))
    assert row.status == _status("task failed (srun: Terminating StepId=1234.0)", last)


def test_a_task_failure_inside_the_window_is_named_too(args):
    last, task = random.randint(3, 9), random.randint(0, 7)
    tail = [_srun_failed(task, "Exited with exit code 1"), TERMINATING, STEP_CANCELLED]
    assert _row(log_then(args, last, tail)).status == f"task {task} exited with exit code 1 (srun) at iteration {last}"


def test_a_scancel_whose_tasks_then_exit_badly_is_still_a_stop_from_outside(args):
    """srun's reports after slurmstepd's line are the cancellation's consequences: the row keeps its numbers."""
    last, task = random.randint(11, 40), random.randint(0, 7)
    cancelled = random.choice([STEP_CANCELLED, f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} ***"])
    tail = [cancelled, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            _srun_failed(task, "Exited with exit code 1"), TERMINATING]
    row = _row(log_then(args, last, tail))
    assert row.status == f"ok (cancelled at iteration {last}, after the window)" and row.step_time_s > 0
