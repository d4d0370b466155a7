"""A log holding a whole, finished run and then a requeued start of the same job that SLURM preempted early: the
row's status is the later start's, and names the earlier start that ran the whole window (its lines in the file and
its iterations), neither hiding it nor silently reading it. Fresh random step times."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: 2026-11-30 12:00:00.000000 "
PREEMPTED = "slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-11-30T12:00:00 DUE TO PREEMPTION ***"


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 20 iterations asked for."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 20})


def _start(args: dict, count: int, tail: str) -> tuple[list[str], list[float]]:
    """One start of the program: its arguments block, iteration lines 1..count (fresh random times), ``tail``."""
    times = random_times(count, random.uniform(60_000.0, 90_000.0))
    lines = [iteration_line(i, 20, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
             for i, ms in enumerate(times, start=1)]
    return [*args_block(args), "> building datasets ...", *lines, tail], times


def test_the_preempted_requeue_names_the_earlier_finished_start(args):
    finished, times = _start(args, 20, DONE)
    preempted_at = random.randint(3, 9)
    requeued, _ = _start(args, preempted_at, PREEMPTED)
    text = "\n".join(finished + requeued) + "\n"
    end = len(finished)
    status = summarise(parse_log_text(text), Window(), 4).status
    assert status == (f"cancelled (preemption) at iteration {preempted_at}; an earlier start of the program, lines "
                      f"1-{end} of the log, ran iterations 1-20 (finished): the log's first {end} lines alone give its "
                      f"numbers (head -n {end})")
    head = "\n".join(text.splitlines()[:end])
    row = summarise(parse_log_text(head), Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[2:10]) / 1000, rel=1e-12)


def test_an_earlier_start_that_did_not_reach_the_window_end_is_not_named(args):
    """A first start cut at iteration 8 ran no whole window 3-10: the status is the later start's alone."""
    cut, _ = _start(args, 8, "")
    requeued, _ = _start(args, 5, PREEMPTED)
    status = summarise(parse_log_text("\n".join(cut + requeued)), Window(), 4).status
    assert status == "cancelled (preemption) at iteration 5"


def test_an_earlier_start_that_crashed_after_the_window_is_named(args):
    """The crash came after the window's last line: the earlier start's window is as whole as a finished run's."""
    crashed, _ = _start(args, 15, "[rank3]: torch.OutOfMemoryError: CUDA out of memory.")
    requeued, _ = _start(args, 5, PREEMPTED)
    status = summarise(parse_log_text("\n".join(crashed + requeued)), Window(), 4).status
    end = len(crashed)
    assert status == (f"cancelled (preemption) at iteration 5; an earlier start of the program, lines 1-{end} of the "
                      f"log, ran iterations 1-15 (out of memory): the log's first {end} lines alone give its numbers "
                      f"(head -n {end})")


def test_an_earlier_start_that_crashed_inside_the_window_is_not_named(args):
    crashed, _ = _start(args, 8, "[rank3]: torch.OutOfMemoryError: CUDA out of memory.")
    requeued, _ = _start(args, 5, PREEMPTED)
    status = summarise(parse_log_text("\n".join(crashed + requeued)), Window(), 4).status
    assert status == "cancelled (preemption) at iteration 5"
