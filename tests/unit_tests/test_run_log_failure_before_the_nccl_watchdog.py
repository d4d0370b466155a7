"""In a multi-node crash one rank fails (a Python traceback, a C++ abort, a segmentation fault, an NCCL error, srun's
report of its task) and the other ranks' NCCL watchdogs time out ten minutes later. The status ranked the watchdog's
line above those markers wherever it stood, so the row read ``NCCL timeout at iteration N`` and hid the error that
caused it; the failure printed before the watchdog's line is now named. A watchdog timeout printed first (a hang, then
the ranks' tracebacks that follow from it) still reads as the NCCL timeout. Fresh random iterations, ranks and
messages."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

STEP_CANCELLED = "slurmstepd: error: *** STEP 1234.0 ON gs01r1b01 CANCELLED AT 2026-11-30T12:10:00 ***"


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return eight_node_strong_args()


def _label(rank: int) -> str:
    """The ``srun --label`` and torchrun prefix of ``rank``'s lines (4 ranks a node)."""
    return f"{rank // 4}: [rank{rank}]:"


def _watchdog(rank: int) -> str:
    """The line of ``rank``'s NCCL watchdog timing out a collective that a dead peer never joined."""
    return (f"{_label(rank)}[E1130 12:10:00 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={random.randint(1, 10**5)}, OpType=ALLREDUCE) ran for 600000 "
            "milliseconds before timing out.")


def _causes(rank: int) -> dict[str, tuple[list[str], str]]:
    """Name -> (the lines of ``rank`` failing, the status they give)."""
    size = random.randint(1000, 99999)
    return {
        "traceback": ([f"{_label(rank)} Traceback (most recent call last):",
                       f'{_label(rank)}   File "/opt/megatron/training/training.py", line 120, in train_step',
                       f"{_label(rank)} RuntimeError: shape '[4, 4096, -1]' is invalid for input of size {size}"],
                      f"crashed (RuntimeError: shape '[4, 4096, -1]' is invalid for input of size {size})"),
        "c++ abort": ([f"{rank // 4}: terminate called after throwing an instance of 'c10::Error'"],
                      "crashed (C++ exception c10::Error)"),
        "segfault": ([f"{_label(rank)} Fatal Python error: Segmentation fault"],
                     "crashed (Fatal Python error: Segmentation fault)"),
        "srun": ([f"srun: error: gs01r1b0{rank // 4}: task {rank // 4}: Exited with exit code 1"],
                 f"task {rank // 4} exited with exit code 1 (srun)"),
    }


@pytest.mark.parametrize("cause", ["traceback", "c++ abort", "segfault", "srun"])
@pytest.mark.parametrize("stopped", [False, True], ids=["no stop line", "step cancelled"])
def test_the_failure_before_the_watchdog_is_named(args, cause, stopped):
    last = random.randint(3, 9)  # inside the window: the row says how the run failed
    failed, waiting = random.sample(range(32), 2)
    lines, status = _causes(failed)[cause]
    ending = [f"srun: error: gs01r1b0{waiting // 4}: task {waiting // 4}: Aborted",
              *([STEP_CANCELLED] if stopped else [])]
    log = parse_log_text(log_then(args, last, [*lines, _watchdog(waiting), *ending]))
    assert log.runs[-1].failure == status
    assert summarise(log, Window(), 4).status == f"{status} at iteration {last}"
    hang_first = parse_log_text(log_then(args, last, [_watchdog(waiting), *lines, *ending]))
    assert hang_first.runs[-1].failure == "NCCL timeout"


def test_a_traceback_whose_exception_line_follows_the_watchdog_is_named(args):
    """Ranks' lines interleave: the watchdog's line of another rank can land between a traceback's header and its
    exception line; the traceback began first."""
    failed, waiting = random.sample(range(32), 2)
    lines, status = _causes(failed)["traceback"]
    log = parse_log_text(log_then(args, random.randint(1, 40), [*lines[:2], _watchdog(waiting), lines[2]]))
    assert log.runs[-1].failure == status


def _timeout_tracebacks(rank: int) -> list[list[str]]:
    """The tracebacks of ``rank`` whose exception is the NCCL timeout itself: the watchdog's ``DistBackendError``
    reaching Python, and a ``RuntimeError`` of the aborted communicator."""
    frame = f'{_label(rank)}   File "/opt/megatron/core/distributed/param_and_grad_buffer.py", line 412, in finish'
    return [[f"{_label(rank)} Traceback (most recent call last):", frame,
             f"{_label(rank)} torch.distributed.DistBackendError: [Rank {rank}] Watchdog caught collective operation "
             f"timeout: WorkNCCL(SeqNum={random.randint(1, 10**5)}, OpType=ALLREDUCE) ran for 600000 milliseconds "
             "before timing out."],
            [f"{_label(rank)} Traceback (most recent call last):", frame,
             f"{_label(rank)} RuntimeError: NCCL communicator was aborted on rank {rank}."]]


@pytest.mark.parametrize("kind", [0, 1], ids=["DistBackendError", "communicator aborted"])
def test_a_traceback_of_the_timeout_itself_is_no_cause(args, kind):
    """The watchdog's timeout can first show as a traceback's exception line: that traceback is the timeout, not the
    failure it followed. It read ``crashed (torch.distributed.DistBackendError: [Rank 5] Watchdog caught ...)``; a
    real failure printed before it is still named."""
    last = random.randint(3, 9)
    failed, waiting = random.sample(range(32), 2)
    timeout = _timeout_tracebacks(waiting)[kind]
    alone = parse_log_text(log_then(args, last, [*timeout, _watchdog(waiting)]))
    assert alone.runs[-1].failure == "NCCL timeout"
    assert summarise(alone, Window(), 4).status == f"NCCL timeout at iteration {last}"
    lines, status = _causes(failed)["traceback"]
    assert parse_log_text(log_then(args, last, [*lines, *timeout, _watchdog(waiting)])).runs[-1].failure == status
