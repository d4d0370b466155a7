"""``oellm table`` on the log of a job writing a checkpoint inside the window: megatron-core 0.19.2 prints ``[stamp]
saving checkpoint at iteration N to DIR in FORMAT format`` as the save begins and ``[stamp] successfully saved
checkpoint from iteration N ...`` once it ended, nothing in between; a large model's save takes many minutes. Silent
longer than the quiet time (ten minutes) after that line, the row read "truncated at iteration k/N" meanwhile; it now
says the job may still be running, saving, for up to an hour after the save began by its line's timestamp. A save
that ended, one begun longer ago, a fresh copy of such a log, a save line without a timestamp (an older Megatron) and
a text without a file keep "truncated". Fresh random step times, stops and silences."""

from __future__ import annotations

import os
import random
import time
from datetime import datetime, timedelta

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from megatron.oellm.scaling_table.window import QUIET_S
from tests.unit_tests.megatron_logs import args_block, eight_node_strong_args, iteration_line, random_times

SAVE = "/scratch/ckpt"
SAVE_QUIET_S = 3600.0
"""How long after a save began its job may still be saving: an hour, as README says."""


@pytest.fixture(scope="module")
def args() -> dict:
    """The 8-node strong-scaling row's arguments, 40 iterations asked for, one line an iteration."""
    return {**eight_node_strong_args(train_iters=40), "log_interval": 1}


def _saving(iteration: int, at: datetime | None) -> str:
    """megatron's line as it begins to save the checkpoint of ``iteration`` at ``at`` (no timestamp: None)."""
    stamp = f"[{at:%Y-%m-%d %H:%M:%S.%f}] " if at is not None else ""
    return f"{stamp}saving checkpoint at iteration {iteration:7d} to {SAVE} in torch_dist format"


def _saved(iteration: int, at: datetime) -> str:
    """megatron-core 0.19.2's line once the save of ``iteration``'s checkpoint ended at ``at``."""
    return (f"  [{at:%Y-%m-%d %H:%M:%S.%f}] successfully saved checkpoint from iteration {iteration:7d} to {SAVE} "
            "[ t 1/1, gtp_remat 1/1, p 1/4 ]")


def _log(args: dict, last: int, save_begun: datetime, tail: list[str]) -> str:
    """A run's log: the arguments block, iteration lines 1..``last`` (fresh random times), the last printed a second
    before ``save_begun``, then ``tail``."""
    times = random_times(last, random.uniform(60_000.0, 90_000.0))
    printed = [save_begun - timedelta(seconds=1, milliseconds=sum(times[k + 1:])) for k in range(last)]
    lines = [iteration_line(i, 40, args["global_batch_size"], ms, 130.0, at)
             for i, ms, at in zip(range(1, last + 1), times, printed, strict=True)]
    return "\n".join([*args_block(args), "> building datasets ...", *lines, *tail]) + "\n"


def _status(capsys, path) -> str:
    """The status of the one row of ``oellm table PATH``."""
    assert main(["table", str(path)]) == 1  # no row has numbers
    row = next(line for line in capsys.readouterr().out.splitlines() if f"{path.name} |" in line)
    return row.rsplit("|", 2)[-2].strip()


def _written(path, text: str, seconds_ago: float) -> None:
    """Write ``text`` to ``path``, its modification time ``seconds_ago`` seconds into the past."""
    path.write_text(text)
    then = time.time() - seconds_ago
    os.utime(path, (then, then))


def _save_within_the_hour(first_last: int = 2) -> tuple[int, float, datetime]:
    """Fresh draws of a save begun within the hour, past the quiet time: (the last iteration line, from
    ``first_last`` to 9; seconds since the save began; when it began)."""
    silent = random.uniform(QUIET_S + 300, SAVE_QUIET_S - 300)
    return random.randint(first_last, 9), silent, datetime.now() - timedelta(seconds=silent)


def test_a_log_silent_in_a_checkpoint_save_may_still_be_running(args, tmp_path, capsys):
    last, silent, begun = _save_within_the_hour()
    path = tmp_path / "slurm-1234.out"
    _written(path, _log(args, last, begun, [_saving(last, begun)]), silent)
    assert _status(capsys, path) == (
        f"ends at iteration {last}/40, before the window 3-10 ends: still running (saving the checkpoint of iteration "
        f"{last} since {begun:%Y-%m-%d %H:%M:%S}), or killed without a message")
    ended = _log(args, last, begun, [_saving(last, begun), _saved(last, begun + timedelta(seconds=random.randint(1, 60)))])
    _written(path, ended, silent)  # the save ended, then silence: killed
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    assert summarise(parse_log_text(_log(args, last, begun, [_saving(last, begun)])), Window(), 4).status == (
        f"truncated at iteration {last}/40")  # no file


def test_a_save_begun_long_ago_or_copied_is_a_kill(args, tmp_path, capsys):
    """A save begun over an hour ago, its log unwritten since; a fresh copy (``cp``, ``sed``) of such a log, written a
    moment ago; and a save line without a timestamp, as an older Megatron prints it, silent past the quiet time."""
    last = random.randint(2, 9)
    path = tmp_path / "slurm-1234.out"
    long_ago = random.uniform(SAVE_QUIET_S + 300, 7 * 86400)
    begun = datetime.now() - timedelta(seconds=long_ago)
    text = _log(args, last, begun, [_saving(last, begun)])
    _written(path, text, long_ago)
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    _written(path, text, 0)
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    _, silent, begun = _save_within_the_hour()
    _written(path, _log(args, last, begun, [_saving(last, None)]), silent)
    assert _status(capsys, path) == f"truncated at iteration {last}/40"


def test_a_fresh_copy_of_a_log_killed_in_its_save_within_the_hour_is_a_kill(args, tmp_path, capsys):
    """The copy's modification time is the copy's, long after the save line: read as the kill it shows."""
    last, silent, begun = _save_within_the_hour()
    path = tmp_path / "copy-of-slurm-1234.out"
    _written(path, _log(args, last, begun, [_saving(last, begun)]), random.uniform(0, 60))
    assert _status(capsys, path) == f"truncated at iteration {last}/40"


def test_a_log_stamped_in_a_zone_ahead_of_the_reader_is_a_kill(args, tmp_path, capsys):
    """A job killed in its save, its log read where local time is hours behind the nodes': the line's time reads as
    minutes ahead (or ago), the file's as hours before it."""
    last = random.randint(2, 9)
    killed = random.uniform(QUIET_S + 300, 2 * SAVE_QUIET_S)
    ahead = timedelta(hours=random.randint(2, 12))
    begun = datetime.now() - timedelta(seconds=killed) + ahead
    path = tmp_path / "slurm-1234.out"
    _written(path, _log(args, last, begun, [_saving(last, begun)]), killed)
    assert _status(capsys, path) == f"truncated at iteration {last}/40"


def test_a_local_save_that_ended_is_no_save_going_on(args, tmp_path, capsys):
    """``--non-persistent-ckpt-type local``: 0.19.2 ends such a save with ``successfully saved local checkpoint``."""
    last, silent, begun = _save_within_the_hour()
    ended = begun + timedelta(seconds=random.uniform(1, 60))
    local_saved = f"  [{ended:%Y-%m-%d %H:%M:%S.%f}] successfully saved local checkpoint from iteration {last:7d}"
    path = tmp_path / "slurm-1234.out"
    _written(path, _log(args, last, begun, [_saving(last, begun), local_saved]), silent)
    assert _status(capsys, path) == f"truncated at iteration {last}/40"


def test_iteration_lines_after_a_save_line_end_that_save(args, tmp_path, capsys):
    """An asynchronous save reports no end before training goes on: iteration lines after its line show the job
    past it, so a log silent after them is read by its last iteration line, not as a save going on."""
    last, silent, begun = _save_within_the_hour(first_last=3)
    lines = _log(args, last, begun, []).splitlines()
    lines.insert(-1, _saving(last - 1, begun - timedelta(seconds=1)))
    path = tmp_path / "slurm-1234.out"
    _written(path, "\n".join(lines) + "\n", silent)
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
