"""A node failure (``*** JOB ... CANCELLED AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***``), an
uncorrectable memory error or SLURM's failed job makes the other ranks lose their peers: NCCL tracebacks, watchdog
timeouts and ``terminate called after throwing ... DistBackendError`` follow slurmstepd's line. They are its
consequences: the status names the stop, not ``crashed (torch.distributed.DistBackendError ...)`` or ``NCCL
timeout``. Such stops are faults of the run's hardware, not outside stops; after the window's last line the rows
keep their numbers and name the stop. An NCCL error shown before slurmstepd's line still wins. Fresh random
iterations, step times and ranks."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

STAMP = "2026-11-30T12:00:00"
STOPS = {
    "cancelled (node failure)":
        f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR "
        "DETAILS ***",
    "cancelled (uncorrectable memory error)":
        f"slurmstepd: error: *** STEP 1234.0 ON gs03r1b01 UNCORRECTABLE MEMORY ERROR AT {STAMP} ***",
    "failed (SLURM: non-zero exit code or other failure mode)":
        "slurmstepd: error: *** JOB 1234 ON gs01r1b01 FAILED (non-zero exit code or other failure mode) ***",
}
"""The row status -> slurmstepd's line of a stop that is a fault of the run's hardware or of the run."""


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return eight_node_strong_args()


def _nccl_noise() -> dict[str, list[str]]:
    """What a surviving rank prints once its peers are gone: name -> its lines."""
    rank = random.randint(0, 31)
    prefix = f"{rank // 4}: [rank{rank}]:"
    return {
        "traceback": [f"{prefix} Traceback (most recent call last):", f'{prefix}   File "/opt/train.py", line 3, in step',
                      f"{prefix} torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                      "unhandled system error, remote process exited or there was a network error"],
        "watchdog": [f"{prefix}[E1130 12:00:01 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
                     f"operation timeout: WorkNCCL(SeqNum={random.randint(1, 10**5)}, OpType=ALLREDUCE) ran for 600000 "
                     "milliseconds before timing out."],
        "terminate": [f"{prefix}[E1130 12:00:01 ProcessGroupNCCL.cpp:1895] Process group watchdog thread terminated "
                      "with exception: NCCL error: remote process exited or there was a network error",
                      f"{rank // 4}: terminate called after throwing an instance of 'c10::DistBackendError'"],
    }


@pytest.mark.parametrize("status", STOPS)
@pytest.mark.parametrize("noise", ["traceback", "watchdog", "terminate"])
def test_nccl_errors_after_the_stop_are_its_consequences(args, status, noise):
    last = random.randint(11, 40)
    tail = [STOPS[status], *_nccl_noise()[noise], f"srun: error: gs03r1b01: task {random.randint(0, 7)}: Killed"]
    log = parse_log_text(log_then(args, last, tail))
    assert log.runs[-1].failure == status and not log.runs[-1].stopped_from_outside
    row = summarise(log, Window(), 4)
    assert row.status == f"ok ({status} at iteration {last}, after the window)" and row.step_time_s > 0


@pytest.mark.parametrize("status", STOPS)
def test_an_nccl_timeout_before_the_stop_still_wins(args, status):
    last = random.randint(11, 40)
    tail = [*_nccl_noise()["watchdog"], STOPS[status]]
    assert summarise(parse_log_text(log_then(args, last, tail)), Window(), 4).status == \
        f"ok (NCCL timeout at iteration {last}, after the window)"
