"""``oellm table`` on the log of a job still running inside the window: its lines stop at iteration k before the
window's end, with no stop line, no traceback, and the file written a moment ago, moments after its last iteration
line's timestamp. The row read "truncated at iteration k/N", telling a user checking a running job that it was
killed; it now says the job may still be running. A log written long ago, a fresh copy of an older log (``cp``,
``sed``: the file's time is the copy's, far after its last line's), a line without a timestamp, a start that a later
one followed, one whose last line is cut (a kill mid-write), a pipe, a compressed archive and a text without a file
keep "truncated". Fresh random step times."""

from __future__ import annotations

import gzip
import os
import random
import threading
import time
from datetime import datetime, timedelta

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text, read_log
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, eight_node_strong_args, iteration_line, random_times


@pytest.fixture(scope="module")
def args() -> dict:
    """The 8-node strong-scaling row's arguments, 40 iterations asked for."""
    return eight_node_strong_args(train_iters=40)


def _lines(args: dict, iterations: range, last_printed: datetime) -> list[str]:
    """Iteration lines of ``iterations`` (fresh random times), each stamped when a run at those times printed it, the
    last one at ``last_printed`` (naive local time, as megatron prints it)."""
    times = random_times(len(iterations), random.uniform(60_000.0, 90_000.0))
    printed = [last_printed - timedelta(milliseconds=sum(times[k + 1:])) for k in range(len(times))]
    return [iteration_line(i, args["train_iters"], args["global_batch_size"], ms, 130.0, at)
            for i, ms, at in zip(iterations, times, printed, strict=True)]


def _log(args: dict, last: int, ago_s: float = 0.0) -> str:
    """A run's log: the arguments block, then iteration lines 1..``last``, the last one printed ``ago_s`` seconds
    ago."""
    lines = _lines(args, range(1, last + 1), datetime.now() - timedelta(seconds=ago_s))
    return "\n".join([*args_block(args), "> building datasets ...", *lines]) + "\n"


def _status(capsys, path) -> str:
    """The status of the one row of ``oellm table PATH``."""
    assert main(["table", str(path)]) == 1  # no row has numbers
    row = next(line for line in capsys.readouterr().out.splitlines() if f"{path.name} |" in line)
    return row.rsplit("|", 2)[-2].strip()


def _written_ago(path, seconds: float) -> None:
    """Set ``path``'s modification time ``seconds`` into the past."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def _running(last: int) -> str:
    """The status of a run whose lines stop at ``last`` and that may still be running."""
    return f"ends at iteration {last}/40, before the window 3-10 ends: still running, or killed without a message"


def test_a_log_written_a_moment_ago_may_still_be_running(args, tmp_path, capsys):
    last = random.randint(2, 9)
    text = _log(args, last)
    path = tmp_path / "slurm-1234.out"
    path.write_text(text)
    assert _status(capsys, path) == _running(last)
    _written_ago(path, random.uniform(3600, 7 * 86400))
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    assert summarise(parse_log_text(text), Window(), 4).status == f"truncated at iteration {last}/40"  # no file
    packed = tmp_path / "slurm-1234.out.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    assert _status(capsys, packed) == f"truncated at iteration {last}/40"


def test_a_fresh_copy_of_an_old_log_is_a_kill(args, tmp_path, capsys):
    """``sed '/ iteration  *16\\//,$d' train.log > copy.log`` (as tools/gpu_acceptance.sh makes its truncated log),
    ``cp`` or ``scp`` of a killed job's log: the file was written a moment ago, its last line an hour or days before.
    A line without a timestamp (an older Megatron) gives no proof of a running job either."""
    last = random.randint(2, 9)
    path = tmp_path / "copy.log"
    path.write_text(_log(args, last, ago_s=random.uniform(3600, 7 * 86400)))
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    path.write_text(_log(args, last))  # the control: the log of a job still writing it
    assert _status(capsys, path) == _running(last)
    unstamped = _log(args, last).splitlines()
    path.write_text("\n".join(line[line.index("] iteration") + 1:] if "] iteration " in line else line
                              for line in unstamped) + "\n")
    assert _status(capsys, path) == f"truncated at iteration {last}/40"


def test_a_start_another_followed_is_no_running_job(args, tmp_path, capsys):
    """A requeued job's log: its first start, killed without a message at iteration k inside the window, then a start
    resumed after the window, still running. The window's row reads the first start, which ended."""
    last = random.randint(3, 9)
    now = datetime.now()
    resumed = [*args_block(args), " successfully loaded checkpoint from /ckpt [ t 1/1, gtp_remat 1/1, p 1/4 ] at "
               "iteration 20", *_lines(args, range(21, 24), now)]
    first = [*args_block(args), *_lines(args, range(1, last + 1), now - timedelta(minutes=5))]
    path = tmp_path / "slurm-1234.out"
    path.write_text("\n".join(first + resumed) + "\n")
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    path.write_text("\n".join(first) + "\n")  # the control: the first start alone may still run
    assert _status(capsys, path) == _running(last)


def _read_from_a_pipe(text: str):
    """``read_log`` of a pipe that a thread fills with ``text`` (as ``oellm table <(cat out.7)`` reads one)."""
    reader, writer = os.pipe()

    def feed() -> None:
        with os.fdopen(writer, "w") as pipe:
            pipe.write(text)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        return read_log(f"/dev/fd/{reader}")
    finally:
        feeder.join(timeout=60)
        os.close(reader)


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_pipe_is_no_running_job(args):
    """A pipe's time is that of its last write, a moment ago: no file a job is still writing."""
    last = random.randint(2, 9)
    log = _read_from_a_pipe(_log(args, last))
    assert log.written_at is None and summarise(log, Window(), 4).status == f"truncated at iteration {last}/40"


def test_a_cut_last_line_is_a_kill_however_recent(args, tmp_path, capsys):
    """A kill mid-write leaves half a line; the row names it and stays "truncated"."""
    last = random.randint(2, 8)
    text = _log(args, last + 1).rstrip("\n")
    cut = text[:text.rindex("elapsed time per iteration (ms): ") + 36]
    path = tmp_path / "slurm-1234.out"
    path.write_text(cut)
    assert _status(capsys, path) == (f"truncated at iteration {last}/40 (the line of iteration {last + 1} is cut: "
                                     f"line {cut.count(chr(10)) + 1})")
    path.write_text(cut[:cut.rindex("\n") + 1])  # the whole lines before it: no sign of a kill
    assert _status(capsys, path).startswith(f"ends at iteration {last}/40, before the window 3-10 ends: still running")


def test_a_long_log_interval_allows_a_longer_quiet(args, tmp_path, capsys):
    """A job printing every 100th iteration at over a minute each writes its log every 100 minutes or more: two hours
    after its first line it may still run, while one printing every iteration has been quiet too long."""
    path = tmp_path / "slurm-1234.out"
    ms = round(random.uniform(60_000.0, 90_000.0), 1)
    for interval, status in ((100, "ends at iteration 1/1000, before the window 3-10 ends: still running, or killed "
                                   "without a message"), (1, "truncated at iteration 1/1000")):
        run_args = {**args, "log_interval": interval, "train_iters": 1000}
        printed = datetime.now() - timedelta(hours=2)
        lines = [*args_block(run_args), iteration_line(1, 1000, args["global_batch_size"], ms, 130.0, printed)]
        path.write_text("\n".join(lines) + "\n")
        _written_ago(path, 2 * 3600)
        assert _status(capsys, path) == status
