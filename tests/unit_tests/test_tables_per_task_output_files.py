"""``oellm table`` on one task's output file (``srun -o out.%t``) and on a job that stopped before its first
iteration: megatron prints the arguments block from rank 0 only and the iteration lines from the last rank only,
so neither file alone gives numbers, and the status says which file (or a combined log) to give instead of
advising a window or calling the log no Megatron log. Fresh random step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

STAMP = "2026-11-30 12:00:00.000000"
LAST_RANK = ("megatron prints iteration lines from the last rank only: give the last task's output file or a "
             "combined log")


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 30 iterations asked for."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 30})


def _first_task(args: dict, tail: list[str]) -> str:
    """Rank 0's file: the arguments block and megatron's setup messages, no iteration line, then ``tail``."""
    return "\n".join([*args_block(args), "> building datasets ...",
                      " > padded vocab (size: 151643) with 101 dummy tokens (new size: 151744)", *tail]) + "\n"


def _last_task(args: dict) -> str:
    """The last rank's file: iteration lines only (fresh random times), then the end of training."""
    times = random_times(30, random.uniform(60_000.0, 90_000.0))
    lines = [iteration_line(i, 30, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
             for i, ms in enumerate(times, start=1)]
    return "\n".join([*lines, f"[after training is done] datetime: {STAMP} "]) + "\n"


@pytest.mark.parametrize("tail", [[f"[after training is done] datetime: {STAMP} "],
                                  [f"[exiting program at iteration 30] datetime: {STAMP} "]])
def test_the_first_tasks_file_of_a_run_that_ended_names_the_last_rank(args, tail):
    status = summarise(parse_log_text(_first_task(args, tail)), Window(), 4).status
    assert status == f"no iteration line, though the run ended: {LAST_RANK}"


def test_the_first_tasks_file_of_a_cancelled_run_names_the_last_rank(args):
    cancelled = "slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-11-30T12:00:00 DUE TO TIME LIMIT ***"
    status = summarise(parse_log_text(_first_task(args, [cancelled])), Window(), 4).status
    assert status == f"cancelled (time limit) before any iteration line; if this is one task's output file, {LAST_RANK}"


def test_the_last_tasks_file_says_rank_0_prints_the_arguments(args):
    status = summarise(parse_log_text(_last_task(args)), Window(), 4).status
    assert status == ("no arguments block before the iteration lines (truncated before it, or one task's output "
                      "file: megatron prints the block from rank 0 only and iteration lines from the last rank only; "
                      "give a combined log)")
    assert summarise(parse_log_text("not a log\n"), Window(), 4).status == \
        "no arguments block (not a Megatron log, or truncated before it)"


def test_a_job_that_stopped_before_its_first_iteration_says_so(args):
    """An arguments block and no iteration line: it read 'truncated at iteration 0/30'. The job may also be still
    starting: the status says both."""
    total = random.randint(10, 1000)
    status = summarise(parse_log_text(_first_task({**args, "train_iters": total}, [])), Window(), 4).status
    assert status == (f"no iteration line yet (still starting, or stopped before its first iteration of {total}; if "
                      f"this is one task's output file, {LAST_RANK})")


def test_the_first_and_last_tasks_files_together_give_numbers(args):
    """The advice works: rank 0's file then the last rank's, one log."""
    text = _first_task(args, []) + _last_task(args)
    assert summarise(parse_log_text(text), Window(), 4).ok
