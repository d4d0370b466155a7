"""``tools/gpu_acceptance.sh``'s train stage makes a copy of its Qwen3.5 log cut before iteration 16 (``sed``) and runs
``oellm table`` on it at once, to show the row of a killed run: "truncated at iteration 15/30", as docs/benchmarks.md
records it. The copy is written a moment ago, minutes at most after its last line, as the log of a job still running
is: the row read "ends at iteration 15/30 ...: still running, or killed without a message". The copy is dated an hour
back. Run without a GPU: a stand-in ``python3`` prints a fresh log for each training run and runs the real ``oellm
table``. Fresh random step times."""

from __future__ import annotations

import os
import random
import shlex
import sys
from datetime import datetime, timedelta

from tests.unit_tests.gpu_acceptance_helpers import FAKE_PYTHON3, LOADED_CHECKPOINT, ROOT, run_acceptance
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: {:%Y-%m-%d %H:%M:%S.%f} "


def _fresh_log() -> str:
    """The log of the Qwen3.5 strong recipe's row 1 on one GPU at a small batch, 30 iterations of one or two seconds,
    its last line printed a moment ago."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 1, {"world_size": 1, "train_iters": 30,
                                                           "global_batch_size": 8, "micro_batch_size": 1})
    times = random_times(30, random.uniform(1_000.0, 2_000.0))
    end = datetime.now()
    printed = [end - timedelta(milliseconds=sum(times[k + 1:])) for k in range(30)]
    lines = [iteration_line(i, 30, args["global_batch_size"], ms, 60.0, at)
             for i, (ms, at) in enumerate(zip(times, printed, strict=True), start=1)]
    return "\n".join([*args_block(args), *lines, DONE.format(end)]) + "\n"


def test_the_truncated_copy_reads_truncated(tmp_path):
    real_table = f'[[ "$*" == "-m megatron.oellm table "* ]] && exec {shlex.quote(sys.executable)} "$@"\n'
    # the resume to 35 loads the checkpoint of iteration 30 (the stage fails a resume that loaded none)
    resume = f'[[ "$*" == *" recipe "*" --train-iters 35" ]] && printf %b {shlex.quote(LOADED_CHECKPOINT)}\n'
    fake = FAKE_PYTHON3.replace("exit 0\n", real_table + resume + "exit 0\n")
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    done, _ = run_acceptance(tmp_path, tmp_path / "out", "train", run_output=_fresh_log(), fake_python3=fake,
                             environment={"PYTHONPATH": path})
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert done.returncode == 0 and "table of the qwen3.5 logs: rc 0" in summary, (done.stderr, summary)
    row = next(line for line in summary.splitlines() if "train_truncated.log |" in line)
    assert row.rsplit("|", 2)[-2].strip() == "truncated at iteration 15/30", summary
