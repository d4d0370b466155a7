"""A job still starting up (its arguments block, ``> building datasets ...``, nothing after) is not said to have
stopped: a user checking a running job read ``stopped before its first iteration``. The status is neutral and keeps
the per-task output file hint. Fresh random iteration totals."""

from __future__ import annotations

import random

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, megatron_args

LAST_RANK = ("megatron prints iteration lines from the last rank only: give the last task's output file or a "
             "combined log")


def test_a_job_in_start_up_reads_as_no_iteration_line_yet():
    total = random.randint(10, 10_000)
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": total})
    text = "\n".join(["> initializing torch distributed ...", *args_block(args), "> building datasets ...",
                      "setting number of micro-batches to constant 32"]) + "\n"
    status = summarise(parse_log_text(text), Window(), 4).status
    assert status == (f"no iteration line yet (still starting, or stopped before its first iteration of {total}; "
                      f"if this is one task's output file, {LAST_RANK})")
    assert "stopped before its first iteration (of" not in status
