"""megatron's ``successfully loaded checkpoint ... at iteration N`` line printed after a start's iteration lines, the
next start's arguments block not in the log (rank 0 prints it: a log joined from several files, or one filtered of
the block). megatron-core 0.19.2 loads a checkpoint while it sets the model up, before ``train`` prints any iteration
line, so such a line begins the next start, resumed at N. The reader took a load line for its start's only before the
first iteration line and ignored it after: a start resumed where the last one's lines stopped was read as the same
start going on (a window across both was ok, the second start's warm-up in it), and one resumed earlier, split off at
its first line, lost its checkpoint, so that 0.19.2's first line after a checkpoint of iteration ``log_interval`` - 1
was read as an older Megatron's average of iterations 1 to the interval. Fresh random step times and stops."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, eight_node_strong_args, iteration_line, random_times

STARTED = datetime(2026, 11, 30, 11, 0)
"""When the first start's lines' timestamps begin (one second an iteration)."""


def _loaded(iteration: int) -> str:
    """megatron-core 0.19.2's line after it loaded a checkpoint of ``iteration`` (``load_checkpoint``)."""
    return (f"  successfully loaded checkpoint from /scratch/ckpt [ t 1/1, gtp_remat 1/1, p 1/4 ] at iteration "
            f"{iteration}")


def _lines(args: dict, iterations: list[int], started: datetime) -> list[str]:
    """Iteration lines of ``iterations`` (fresh random times, the first two slow), stamped a second apart from
    ``started``."""
    times = random_times(len(iterations), random.uniform(60_000.0, 90_000.0))
    return [iteration_line(i, args["train_iters"], args["global_batch_size"], ms, 130.0,
                           started + timedelta(seconds=k)) for k, (i, ms) in enumerate(zip(iterations, times,
                                                                                            strict=True))]


def test_a_start_resumed_where_the_last_one_stopped_is_a_start_of_its_own():
    args = {**eight_node_strong_args(train_iters=40), "log_interval": 1}
    stop = random.randint(3, 8)
    first = _lines(args, list(range(1, stop + 1)), STARTED)
    second = _lines(args, list(range(stop + 1, 21)), STARTED + timedelta(hours=1))
    log = parse_log_text("\n".join([*args_block(args), *first, "> building datasets ...", _loaded(stop), *second])
                         + "\n")
    assert [(run.start, run.last_iteration, run.resumed_from) for run in log.runs] == [(1, stop, None),
                                                                                       (stop + 1, 20, stop)]
    assert log.runs[1].line_span[0] == len(args_block(args)) + stop + 2  # from the load line on
    assert summarise(log, Window(), 4).status.startswith(
        "the window 3-10 spans a restart: its lines come from 2 starts of the program")


def test_a_start_resumed_earlier_keeps_its_checkpoint():
    """0.19.2 resumed from a checkpoint of iteration ``log_interval`` - 1 after a start that printed lines past it:
    its first line times that iteration alone, its next line averages the interval and that first iteration, the
    warm-up after the load included; the window of the whole interval after the first line is refused."""
    interval = random.choice([5, 10])
    args = {**eight_node_strong_args(train_iters=6 * interval), "log_interval": interval}
    stop = random.randint(2, 4) * interval
    first = _lines(args, [1, *range(interval, stop + 1, interval)], STARTED)
    second = _lines(args, list(range(interval, 5 * interval + 1, interval)), STARTED + timedelta(hours=1))
    log = parse_log_text("\n".join([*args_block(args), *first, _loaded(interval - 1), *second]) + "\n")
    assert [(run.start, run.resumed_from) for run in log.runs] == [(1, None), (interval, interval - 1)]
    window = Window(interval + 1, 2 * interval)
    assert summarise(log, window, 4).status.startswith(
        f"the line of iteration {2 * interval} averages iterations {interval}-{2 * interval}, which begin before the "
        f"window {window}")
