"""Mutation audit 19 of the log reader and the table: a save line without a timestamp (an older Megatron) still marks
a save going on in a log written moments ago; an older release's ``successfully saved checkpoint at iteration N``
ends a save as 0.19.2's ``from iteration`` does; and a window within an older Megatron's resumed start that ends
before its first line is told to end on a logged iteration, not that the start begins after it. Fresh random step
times, iterations, intervals and checkpoints."""

from __future__ import annotations

import os
import random
import time
from datetime import datetime, timedelta

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from megatron.oellm.scaling_table.window import QUIET_S, SAVE_QUIET_S
from tests.unit_tests.megatron_logs import (
    args_block,
    eight_node_strong_args,
    iteration_line,
    megatron_args,
    random_times,
)

SAVE = "/scratch/ckpt"


def _saving(iteration: int, at: datetime | None) -> str:
    """megatron's line as it begins to save the checkpoint of ``iteration`` at ``at`` (an older Megatron: None)."""
    stamp = f"[{at:%Y-%m-%d %H:%M:%S.%f}] " if at is not None else ""
    return f"{stamp}saving checkpoint at iteration {iteration:7d} to {SAVE} in torch_dist format"


def _log(args: dict, last: int, save_begun: datetime, tail: list[str], step_ms: float = 75_000.0,
         gap_s: float = 1.0) -> str:
    """The arguments block, iteration lines 1..``last`` (fresh random times about ``step_ms``, the last printed
    ``gap_s`` seconds before ``save_begun``), then ``tail``."""
    times = random_times(last, step_ms)
    printed = [save_begun - timedelta(seconds=gap_s, milliseconds=sum(times[k + 1:])) for k in range(last)]
    lines = [iteration_line(i, 40, args["global_batch_size"], ms, 130.0, at)
             for i, ms, at in zip(range(1, last + 1), times, printed, strict=True)]
    return "\n".join([*args_block(args), "> building datasets ...", *lines, *tail]) + "\n"


def _status(capsys, path, text: str, seconds_ago: float) -> str:
    """The status of the one row of ``oellm table PATH``, ``path`` holding ``text`` written ``seconds_ago`` ago."""
    path.write_text(text)
    then = time.time() - seconds_ago
    os.utime(path, (then, then))
    assert main(["table", str(path)]) == 1  # no row has numbers
    row = next(line for line in capsys.readouterr().out.splitlines() if f"{path.name} |" in line)
    return row.rsplit("|", 2)[-2].strip()


def test_a_save_line_without_a_timestamp_in_a_fresh_log_is_named(tmp_path, capsys):
    """No time to go by, but the log was written moments ago with its last line: the save it stops at is named."""
    args, last = {**eight_node_strong_args(train_iters=40), "log_interval": 1}, random.randint(2, 9)
    moments = random.uniform(1, QUIET_S / 2)
    begun = datetime.now() - timedelta(seconds=moments)
    status = _status(capsys, tmp_path / "slurm-1234.out", _log(args, last, begun, [_saving(last, None)]), moments)
    assert status == (f"ends at iteration {last}/40, before the window 3-10 ends: still running (saving the checkpoint "
                      f"of iteration {last}), or killed without a message")
    run = parse_log_text(_log(args, last, begun, [_saving(last, None)])).runs[-1]
    assert run.saving is not None and (run.saving.iteration, run.saving.begun_at) == (last, None)


def test_an_older_releases_saved_line_ends_the_save(tmp_path, capsys):
    """``successfully saved checkpoint at iteration N to DIR``, as releases before 0.19.2 print it."""
    args, last = {**eight_node_strong_args(train_iters=40), "log_interval": 1}, random.randint(2, 9)
    silent = random.uniform(QUIET_S + 300, 3000)
    begun = datetime.now() - timedelta(seconds=silent)
    saved = f"  successfully saved checkpoint at iteration {last:7d} to {SAVE}"
    text = _log(args, last, begun, [_saving(last, begun), saved])
    assert parse_log_text(text).runs[-1].saving is None
    assert _status(capsys, tmp_path / "slurm-1234.out", text, silent) == f"truncated at iteration {last}/40"


def test_a_window_ending_on_an_older_megatrons_first_trained_iteration_is_told_the_interval():
    """Resumed from a checkpoint of R (R + 1 no multiple of the interval), an older Megatron's first line comes at the
    next multiple M, averaging R + 1 to M: a window ending at R + 1 lies within the start, so it is told to end on a
    logged iteration, not that the start begins after it."""
    interval = random.choice([5, 10])
    checkpoint = random.choice([r for r in range(1, 5 * interval) if (r + 1) % interval])
    multiple = (checkpoint // interval + 1) * interval
    ends = [multiple + k * interval for k in range(3)]
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": ends[-1],
                                                           "log_interval": interval})
    started = datetime.now() - timedelta(days=random.randint(2, 30))
    lines = [iteration_line(end, ends[-1], args["global_batch_size"], random.uniform(60_000.0, 90_000.0), 130.0,
                            started + timedelta(seconds=end)) for end in ends]
    loaded = f"  successfully loaded checkpoint from {SAVE} [ t 1/1, gtp_remat 1/1, p 1/4 ] at iteration {checkpoint}"
    done = f"[after training is done] datetime: {started + timedelta(seconds=ends[-1] + 1):%Y-%m-%d %H:%M:%S} "
    text = "\n".join([*args_block(args), loaded, *lines, done]) + "\n"
    window = Window(random.randint(1, checkpoint + 1), checkpoint + 1)
    assert summarise(parse_log_text(text), window, 4).status == (
        f"no iteration line in the window {window}: the log interval is {interval}, so megatron printed multiples of "
        f"{interval} only; end the window on one of them")


def test_a_slow_jobs_save_may_go_on_for_its_own_longer_quiet_time(tmp_path, capsys):
    """Steps of about 25 minutes (three of them, the job's quiet time, over an hour), a long evaluation between the
    last line and the save: a save begun more than an hour ago but within that quiet time may still be going on."""
    args, last = {**eight_node_strong_args(train_iters=40), "log_interval": 1}, random.randint(3, 9)
    step_ms = random.uniform(1_400_000.0, 1_600_000.0)  # the last line's time is within 3 % of it (no warm-up)
    silent = random.uniform(SAVE_QUIET_S + 60, 3 * step_ms * 0.97 / 1000 - 60)
    begun = datetime.now() - timedelta(seconds=silent)
    gap_s = random.uniform(3 * step_ms * 1.03 / 1000 + 60, 7200)  # longer than the quiet time: no recent line
    text = _log(args, last, begun, [_saving(last, begun)], step_ms, gap_s)
    assert _status(capsys, tmp_path / "slurm-1234.out", text, silent) == (
        f"ends at iteration {last}/40, before the window 3-10 ends: still running (saving the checkpoint of iteration "
        f"{last} since {begun:%Y-%m-%d %H:%M:%S}), or killed without a message")
