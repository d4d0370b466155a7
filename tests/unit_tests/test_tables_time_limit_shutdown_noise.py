"""SLURM's time limit after the window, then the usual shutdown noise: torchrun's ``SignalException``, a rank's NCCL
watchdog reporting the remote process gone and ``terminate called after throwing an instance of
'c10::DistBackendError'``. Those markers come after slurmstepd's line and are its consequences: the row reads the
outside stop (``ok (cancelled (time limit) ... after the window)``), not ``crashed (C++ exception ...)``. A crash
shown before slurmstepd's line still wins (the row keeps the numbers of a window before it). Fresh random iterations
and step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

STAMP = "2026-11-30T12:00:00"
TIME_LIMIT = [f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} DUE TO TIME LIMIT ***",
              f"slurmstepd: error: *** STEP 1234.0 ON gs01r1b01 CANCELLED AT {STAMP} DUE TO TIME LIMIT ***",
              "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."]
TORCHRUN = ["W1130 12:00:00.123000 12345 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal, "
            "shutting down workers", "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>', "    sys.exit(main())",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 12345 got signal: 15"]
NCCL = ["[rank12]:[E1130 12:00:01.000000000 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 12] Process "
        "group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network "
        "error, NCCL version 2.27.3",
        "[rank12]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.",
        "terminate called after throwing an instance of 'c10::DistBackendError'"]
CONSEQUENCES = {
    "nccl": NCCL,
    "rank traceback": ["[rank5]: Traceback (most recent call last):", '[rank5]:   File "train.py", line 1, in <module>',
                       "[rank5]: RuntimeError: NCCL communicator was aborted on rank 5."],
    "segfault": ["/usr/local/bin/entry.sh: line 3: 4242 Segmentation fault (core dumped) python train.py"],
    "fatal": ["Fatal Python error: Aborted"],
}
"""What ranks print while the step is being torn down after slurmstepd's line."""


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return eight_node_strong_args()


def _status(text: str) -> str:
    """The table row's status of a log's text at the default window."""
    return summarise(parse_log_text(text), Window(), 4).status


@pytest.mark.parametrize("noise", CONSEQUENCES)
def test_noise_after_the_time_limit_keeps_the_numbers(args, noise):
    last = random.randint(11, 40)
    row = summarise(parse_log_text(log_then(args, last, TIME_LIMIT + TORCHRUN + CONSEQUENCES[noise])), Window(), 4)
    assert row.status == f"ok (cancelled (time limit) at iteration {last}, after the window)"
    assert row.step_time_s > 0 and row.tokens_per_s_per_gpu > 0


def test_noise_after_a_stop_inside_the_window_names_the_stop(args):
    last = random.randint(3, 9)
    assert _status(log_then(args, last, TIME_LIMIT + TORCHRUN + NCCL)) == f"cancelled (time limit) at iteration {last}"


def test_a_crash_before_slurmsteps_line_still_wins(args):
    last = random.randint(11, 40)
    assert _status(log_then(args, last, NCCL + TIME_LIMIT + TORCHRUN)) == \
        f"ok (crashed (C++ exception c10::DistBackendError) at iteration {last}, after the window)"
    oom = ["[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert _status(log_then(args, last, oom + TIME_LIMIT + NCCL)) == \
        f"ok (out of memory at iteration {last}, after the window)"
