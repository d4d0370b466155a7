"""The log of a Megatron that prints every ``log_interval``-th iteration only (releases before megatron-core's line of a
start's first iteration), resumed from a checkpoint of iteration R whose next iteration is no multiple of the
interval: megatron prints ``successfully loaded checkpoint ... at iteration R``, then its first line at M, the first
multiple of the interval after R, averaging iterations R+1 to M, and every later line the interval before it. Only a
fresh start (first line at the interval) was read so; this one was read as beginning at M, its line at M timing
iteration M alone: the window M+1 to M+2 x interval, which the lines tile, was refused as "averaging iterations
M-...", R+1 to M as missing R+1 to M-1, and a window before R+1 was told to begin at M. megatron-core 0.19.2 resumed
from R prints its first line at R+1 itself, which times that one iteration, and its line at M averages R+1 to M
again: that log keeps its reading. Fresh random step times, interval and checkpoint."""

from __future__ import annotations

import random
import statistics
from datetime import datetime, timedelta

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "
STARTED = datetime(2026, 11, 30, 11, 0)
"""When the lines' timestamps begin (one second an iteration)."""


def _loaded(iteration: int) -> str:
    """megatron's line after it loaded a checkpoint of ``iteration`` (``load_checkpoint``)."""
    return (f"  successfully loaded checkpoint from /scratch/ckpt [ t 1/1, gtp_remat 1/1, p 1/4 ] at iteration "
            f"{iteration}")


def _resume() -> tuple[int, int, int]:
    """(log interval, checkpoint iteration R, first multiple M of the interval after R), R + 1 no multiple."""
    interval = random.choice([5, 10])
    checkpoint = random.choice([r for r in range(1, 5 * interval) if (r + 1) % interval])
    return interval, checkpoint, (checkpoint // interval + 1) * interval


def _log(interval: int, checkpoint: int, ends: list[int], first_kept: bool) -> tuple[str, list[float]]:
    """The log of a finished start resumed from a checkpoint of iteration ``checkpoint`` with lines at ``ends``, each
    averaging the iterations since the line before (the first: since the load), but the second from the first line's
    own iteration on when ``first_kept`` (0.19.2 resets no timer after a start's first line), all at whole 0.1 ms; the
    text and the step times of iterations 1..``ends[-1]`` (index i: iteration i + 1; the first after the load is
    slow, a warm-up)."""
    total = ends[-1]
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": total,
                                                           "log_interval": interval})
    centre = random.uniform(60_000.0, 90_000.0)
    times = [centre * random.uniform(0.95, 1.05) for _ in range(total)]
    times[checkpoint] = centre * random.uniform(3, 6)
    starts = [checkpoint, *ends[:-1]]
    if first_kept:
        starts[1] = checkpoint
    lines = [iteration_line(end, total, args["global_batch_size"], round(statistics.mean(times[start:end]), 1), 130.0,
                            STARTED + timedelta(seconds=end)) for start, end in zip(starts, ends, strict=True)]
    return "\n".join([*args_block(args), _loaded(checkpoint), *lines, DONE]) + "\n", times


def _mean(times: list[float], first: int, last: int) -> float:
    """The mean step time (s) of iterations ``first..last``."""
    return statistics.mean(times[first - 1:last]) / 1000


def test_an_older_megatron_resumed_is_read_from_its_first_trained_iteration():
    interval, checkpoint, multiple = _resume()
    ends = [multiple + k * interval for k in (1, 2, 3)]
    text, times = _log(interval, checkpoint, [multiple, *ends], first_kept=False)
    tiled = summarise(parse_log_text(text), Window(multiple + 1, multiple + 2 * interval), 4)
    means = [round(statistics.mean(times[end - interval:end]), 1) for end in ends[:2]]
    assert tiled.ok and tiled.step_time_s == pytest.approx(statistics.median(means) / 1000, rel=1e-12)
    first = summarise(parse_log_text(text), Window(checkpoint + 1, multiple, "mean"), 4)
    assert first.ok and first.step_time_s == pytest.approx(_mean(times, checkpoint + 1, multiple), abs=1e-4)
    assert summarise(parse_log_text(text), Window(1, checkpoint), 4).status == (
        f"no iteration line in the window 1-{checkpoint}: this start of the program begins at iteration "
        f"{checkpoint + 1} (resumed from a checkpoint?); give a window within {checkpoint + 1}-{ends[-1]}; e.g. "
        f"--window {multiple + 1}-{multiple + interval}, which leaves out the warm-up after the start")


def test_megatron_core_0_19_2_resumed_keeps_its_first_line_of_one_iteration():
    """The control: 0.19.2's first line at R+1 times the warm-up alone and its line at M averages R+1 to M, so a
    window from R+2 to M is refused; the whole intervals after M are read as before."""
    interval, checkpoint, multiple = _resume()
    ends = [multiple + k * interval for k in (1, 2, 3)]
    text, times = _log(interval, checkpoint, [checkpoint + 1, multiple, *ends], first_kept=True)
    assert summarise(parse_log_text(text), Window(checkpoint + 2, multiple), 4).status.startswith(
        f"the line of iteration {multiple} averages iterations {checkpoint + 1}-{multiple}, which begin before the "
        f"window {checkpoint + 2}-{multiple}")
    tiled = summarise(parse_log_text(text), Window(multiple + 1, multiple + 2 * interval), 4)
    means = [round(statistics.mean(times[end - interval:end]), 1) for end in ends[:2]]
    assert tiled.ok and tiled.step_time_s == pytest.approx(statistics.median(means) / 1000, rel=1e-12)
