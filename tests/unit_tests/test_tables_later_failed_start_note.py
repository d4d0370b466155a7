"""A log holding a whole, finished run and then a later start of the program that failed before the window (a
resubmission on more nodes appended to the same ``sbatch -o`` file, out of memory at iteration 2): the row reads the
first start's window, as before, but said nothing of the later failure. A ``note:`` on stderr now names the start
the row reads and each later failed start, its lines and how it failed. Fresh random step times and iterations."""

from __future__ import annotations

import random

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times, resized

DONE = "[after training is done] datetime: 2026-11-30 12:00:00.000000 "
OOM = ["[rank12]: Traceback (most recent call last):", '[rank12]:   File "pretrain.py", line 1, in <module>',
       "[rank12]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]


def _start(args: dict, count: int, tail: list[str]) -> list[str]:
    """One start of the program: its arguments block, iteration lines 1..count (fresh random times), ``tail``."""
    times = random_times(max(count, 2), random.uniform(60_000.0, 90_000.0))[:count]
    lines = [iteration_line(i, 20, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
             for i, ms in enumerate(times, start=1)]
    return [*args_block(args), "> building datasets ...", *lines, *tail]


def test_a_later_start_that_failed_before_the_window_is_named(tmp_path, capsys):
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 20})
    finished = _start(args, 20, [DONE])
    failed_at = random.randint(1, 2)
    later = _start(resized(args, 64), failed_at, OOM)
    log = tmp_path / "slurm-1234.out"
    log.write_text("\n".join(finished + later) + "\n")
    assert main(["table", str(log)]) == 0
    captured = capsys.readouterr()
    assert "| ok |" in captured.out
    end = len(finished)
    assert (f"note: {log}: its row gives the numbers of the start of the program at lines 1-{end} (iterations 1-20); "
            f"a later start of the program failed and gives no numbers: lines {end + 1}-{end + len(later)}, out of "
            f"memory at iteration {failed_at}") in captured.err.splitlines()


OUTSIDE = {"time limit": "DUE TO TIME LIMIT ", "preemption": "DUE TO PREEMPTION ", "requeue": "DUE TO JOB REQUEUE ",
           "scancel": ""}
"""SLURM's reasons for stopping a job from outside (none: ``scancel``), as slurmstepd's cancellation line prints them."""


def _resumed(args: dict, first: int, last: int, tail: list[str]) -> list[str]:
    """A start of the program resumed from a checkpoint: its arguments block, iteration lines first..last of 40
    (fresh random times), ``tail``."""
    times = random_times(last - first + 2, random.uniform(60_000.0, 90_000.0))
    lines = [iteration_line(i, 40, args["global_batch_size"], times[i - first], round(random.uniform(100, 140), 1))
             for i in range(first, last + 1)]
    return [*args_block(args), "> building datasets ...", *lines, *tail]


def _stopped(reason: str) -> str:
    """slurmstepd's line of SLURM cancelling job 1234 for ``reason`` (a key of :data:`OUTSIDE`)."""
    return f"slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT 2026-11-30T12:10:00 {OUTSIDE[reason]}***"


def test_a_later_start_slurm_stopped_from_outside_is_not_named_as_failed(tmp_path, capsys):
    """A requeued checkpointed job appends each start to its ``slurm-<id>.out`` (``--open-mode=append``), each ended
    by its time limit, a preemption, a requeue or a ``scancel``: the note named such a later start as one that
    failed. Only a start that did fail (out of memory) is named."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 40})
    first_stop, *later_stops = random.choices(list(OUTSIDE), k=3)
    resumed_at = random.randint(12, 20)
    starts = [_resumed(args, 1, resumed_at - 1, [_stopped(first_stop)]),
              _resumed(args, resumed_at, resumed_at + 9, [_stopped(later_stops[0])])]
    log = tmp_path / "slurm-1234.out"
    log.write_text("\n".join(starts[0] + starts[1]) + "\n")
    assert main(["table", str(log)]) == 0
    captured = capsys.readouterr()
    assert f"| ok ({_stopped_status(first_stop)} at iteration {resumed_at - 1}, after the window) |" in captured.out
    assert "note:" not in captured.err
    oom_at = resumed_at + 10 + random.randint(1, 5)
    starts += [_resumed(args, resumed_at + 10, oom_at, OOM), _resumed(args, oom_at, oom_at + 2, [_stopped(later_stops[1])])]
    log.write_text("\n".join(line for start in starts for line in start) + "\n")
    assert main(["table", str(log)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    begin = sum(len(start) for start in starts[:2]) + 1
    assert len(notes) == 1 and notes[0].endswith(
        f"a later start of the program failed and gives no numbers: lines {begin}-{begin + len(starts[2]) - 1}, out of "
        f"memory at iteration {oom_at}")


def _stopped_status(reason: str) -> str:
    """The row's status of SLURM's stop for ``reason`` (a key of :data:`OUTSIDE`)."""
    return "cancelled" if reason == "scancel" else f"cancelled ({OUTSIDE[reason][len('DUE TO '):-1].lower()})"
