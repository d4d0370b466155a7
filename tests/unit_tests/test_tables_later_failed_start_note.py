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
