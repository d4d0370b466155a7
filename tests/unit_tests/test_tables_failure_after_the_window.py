"""A run that failed only after the line of the window's last iteration was printed whole keeps the window's numbers,
its status ``ok (<failure> at iteration N, after the window)``: an NCCL watchdog timeout at teardown, a full disk in
the final checkpoint save, W&B failing to finish, an out-of-memory error at a later iteration. They read ``NCCL
timeout at iteration 10`` or ``crashed (...)`` without numbers, while SLURM's time limit after the window kept them.
A failure first shown before that line still gives no numbers. Fresh random step times and iterations."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import eight_node_strong_args, log_then

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "
NCCL = ("[rank12]:[E1130 12:00:01.000000000 ProcessGroupNCCL.cpp:632] [Rank 12] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=9, OpType=_ALLGATHER_BASE) ran for 600000 milliseconds before timing out.")
QUOTA = [" saving checkpoint at iteration      10 to /scratch/ckpt in torch_dist format",
         "[rank0]: Traceback (most recent call last):",
         '[rank0]:   File "megatron/training/checkpointing.py", line 500, in save_checkpoint',
         "[rank0]: OSError: [Errno 122] Disk quota exceeded"]
WANDB = ["Traceback (most recent call last):",
         '  File "/usr/lib/python3/site-packages/wandb/sdk/wandb_run.py", line 2200, in _on_finish',
         "wandb.errors.CommError: Network error (ConnectionError), entering retry loop."]
OOM = ["[rank31]: Traceback (most recent call last):", '[rank31]:   File "train.py", line 1, in step',
       "[rank31]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
TEARDOWNS = {
    "nccl": ([DONE, NCCL], "NCCL timeout"),
    "quota": (QUOTA, "crashed (OSError: [Errno 122] Disk quota exceeded)"),
    "wandb": ([DONE, *WANDB],
              "crashed (wandb.errors.CommError: Network error (ConnectionError), entering retry loop.)"),
}
"""Failures after a 10-iteration run's last line, with the failure its status names."""


def _numbers(row) -> tuple:
    """The row's numbers."""
    return row.step_time_s, row.tokens_per_s_per_gpu, row.tflops_per_gpu, row.tflops_per_gpu_logged, row.mfu


def _rows(args: dict, last: int, tail: list[str], window: Window):
    """The rows of one log (iterations 1..``last``, then ``tail``) and of the same log ending cleanly."""
    text = log_then(args, last, tail)
    clean = "\n".join(text.splitlines()[:-len(tail)] + [DONE]) + "\n"
    return summarise(parse_log_text(text), window, 4), summarise(parse_log_text(clean), window, 4)


@pytest.mark.parametrize("teardown", TEARDOWNS)
def test_a_failure_after_the_last_line_of_a_finished_run_keeps_the_numbers(teardown):
    tail, failure = TEARDOWNS[teardown]
    row, clean = _rows(eight_node_strong_args(10), 10, tail, Window())
    assert row.status == f"ok ({failure} at iteration 10, after the window)"
    assert clean.status == "ok" and None not in _numbers(row) and _numbers(row) == _numbers(clean)


def test_an_oom_at_a_later_iteration_keeps_the_numbers_of_the_window():
    last = random.randint(11, 19)
    row, clean = _rows(eight_node_strong_args(20), last, OOM, Window())
    assert row.status == f"ok (out of memory at iteration {last}, after the window)"
    assert _numbers(row) == _numbers(clean) and row.step_time_s > 0


def test_the_same_failure_inside_the_window_gives_no_numbers():
    last = random.randint(11, 19)
    row, _ = _rows(eight_node_strong_args(20), last, OOM, Window(3, last + 1))
    assert row.status == f"out of memory at iteration {last}" and row.step_time_s is None


def test_a_failure_shown_before_the_windows_last_line_gives_no_numbers():
    """A traceback printed between the lines of 9 and 10 (one line after it is no proof that training went on):
    the failure's first marker comes before the window's last line."""
    text = log_then(eight_node_strong_args(20), 10, [])
    lines = text.splitlines()
    lines[-1:-1] = OOM
    row = summarise(parse_log_text("\n".join(lines) + "\n"), Window(), 4)
    assert row.status == "out of memory at iteration 10" and row.step_time_s is None


def test_the_table_prints_the_numbers_and_exits_0(tmp_path, capsys):
    tail, failure = TEARDOWNS[random.choice(list(TEARDOWNS))]
    (tmp_path / "run.log").write_text(log_then(eight_node_strong_args(10), 10, tail))
    assert main(["table", str(tmp_path / "run.log")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "run.log |" in line)
    assert row.startswith("| 8 | 32 | 4096 |") and row.endswith(f"| ok ({failure} at iteration 10, after the window) |")
