"""slurmstepd writes its ``*** JOB ... CANCELLED ... ***`` line from a process of its own, so the line can land inside
a rank's traceback: header and frames before it, the exception line after it. Such a traceback was raised before the
stop and counts with its exception line: torchrun's ``SignalException`` or a DataLoader worker's SIGTERM stays a
consequence of a time limit or ``scancel`` (the row keeps its numbers), a CUDA OOM stays ``out of memory``. Cutting
the log at the stop line read them as a bare ``crashed``. A traceback the stop cut short (no exception line anywhere)
is no crash. Fresh random iterations, step times, ranks and pids."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

STAMP = "2026-11-30T12:00:00"
STOPS = {"time limit": f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} DUE TO TIME LIMIT ***",
         "scancel": f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT {STAMP} ***"}
"""slurmstepd's line of an outside stop -> the row status it gives (``cancelled (time limit)``, ``cancelled``)."""
STATUS = {"time limit": "cancelled (time limit)", "scancel": "cancelled"}


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 1000 iterations asked for."""
    return eight_node_strong_args()


def _split(prefix: str, exception: str, stop: str) -> list[str]:
    """A traceback of launcher prefix ``prefix`` with slurmstepd's ``stop`` line between its frames and ``exception``."""
    frames = random.randint(1, 4)
    lines = [f"{prefix}Traceback (most recent call last):"]
    lines += [f'{prefix}  File "/opt/train_{k}.py", line {random.randint(1, 900)}, in step' for k in range(frames)]
    at = random.randint(1, len(lines))
    return [*lines[:at], stop, *lines[at:], f"{prefix}{exception}"]


def _rank_prefix() -> str:
    """``srun --label``'s and torchrun's prefix of a random rank."""
    rank = random.randint(0, 31)
    return f"{rank // 4}: [rank{rank}]: "


def _consequences() -> dict[str, tuple[str, str]]:
    """Exceptions that follow from the job being stopped: name -> (launcher prefix, exception line)."""
    pid = random.randint(1000, 99999)
    return {"torchrun": (f"{random.randint(0, 7)}: ", "torch.distributed.elastic.multiprocessing.api.SignalException: "
                         f"Process {pid} got signal: 15"),
            "dataloader": (_rank_prefix(), f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: "
                           "Terminated.")}


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("consequence", ["torchrun", "dataloader"])
def test_a_stop_inside_a_consequence_traceback_keeps_the_numbers(args, stop, consequence):
    last = random.randint(11, 40)
    prefix, exception = _consequences()[consequence]
    tail = _split(prefix, exception, STOPS[stop]) + [f"srun: error: gs01r1b02: task {random.randint(0, 7)}: Exited "
                                                     "with exit code 1"]
    run = parse_log_text(log_then(args, last, tail))
    assert run.runs[-1].failure == STATUS[stop] and run.runs[-1].stopped_from_outside
    row = summarise(run, Window(), 4)
    assert row.status == f"ok ({STATUS[stop]} at iteration {last}, after the window)"
    assert row.step_time_s > 0 and row.tokens_per_s_per_gpu > 0


@pytest.mark.parametrize("stop", STOPS)
def test_an_oom_split_by_the_stop_is_named(args, stop):
    last = random.randint(11, 40)
    exception = f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {random.randint(1, 40)}.00 GiB"
    run = parse_log_text(log_then(args, last, _split(_rank_prefix(), exception, STOPS[stop])))
    assert run.runs[-1].failure == "out of memory" and not run.runs[-1].stopped_from_outside
    assert summarise(run, Window(), 4).status == f"ok (out of memory at iteration {last}, after the window)"


@pytest.mark.parametrize("stop", STOPS)
def test_a_crash_split_by_the_stop_keeps_its_exception(args, stop):
    last = random.randint(11, 40)
    message = f"boom {random.randint(1, 10**6)}"
    run = parse_log_text(log_then(args, last, _split(_rank_prefix(), f"ValueError: {message}", STOPS[stop])))
    assert summarise(run, Window(), 4).status == \
        f"ok (crashed (ValueError: {message}) at iteration {last}, after the window)"


@pytest.mark.parametrize("stop", STOPS)
def test_a_traceback_the_stop_cut_short_is_no_crash(args, stop):
    last = random.randint(11, 40)
    tail = _split(_rank_prefix(), "", STOPS[stop])[:-1]  # no exception line anywhere
    row = summarise(parse_log_text(log_then(args, last, tail)), Window(), 4)
    assert row.status == f"ok ({STATUS[stop]} at iteration {last}, after the window)"
    assert row.step_time_s > 0
