"""``oellm table`` on the log of a job still running inside the window: its lines stop at iteration k before the
window's end, with no stop line, no traceback, and the file written a moment ago. The row read "truncated at iteration
k/N", telling a user checking a running job that it was killed; it now says the job may still be running. A log
written long ago, one whose last line is cut (a kill mid-write), a compressed archive and a text without a file keep
"truncated". Fresh random step times."""

from __future__ import annotations

import gzip
import os
import random
import time

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, eight_node_strong_args, iteration_line, log_then


@pytest.fixture(scope="module")
def args() -> dict:
    """The 8-node strong-scaling row's arguments, 40 iterations asked for."""
    return eight_node_strong_args(train_iters=40)


def _status(capsys, path) -> str:
    """The status of the one row of ``oellm table PATH``."""
    assert main(["table", str(path)]) == 1  # no row has numbers
    row = next(line for line in capsys.readouterr().out.splitlines() if f"{path.name} |" in line)
    return row.rsplit("|", 2)[-2].strip()


def _written_ago(path, seconds: float) -> None:
    """Set ``path``'s modification time ``seconds`` into the past."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_log_written_a_moment_ago_may_still_be_running(args, tmp_path, capsys):
    last = random.randint(2, 9)
    text = log_then(args, last, [])
    path = tmp_path / "slurm-1234.out"
    path.write_text(text)
    assert _status(capsys, path) == (f"ends at iteration {last}/40, before the window 3-10 ends: still running, or "
                                     "killed without a message")
    _written_ago(path, random.uniform(3600, 7 * 86400))
    assert _status(capsys, path) == f"truncated at iteration {last}/40"
    assert summarise(parse_log_text(text), Window(), 4).status == f"truncated at iteration {last}/40"  # no file
    packed = tmp_path / "slurm-1234.out.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    assert _status(capsys, packed) == f"truncated at iteration {last}/40"


def test_a_cut_last_line_is_a_kill_however_recent(args, tmp_path, capsys):
    """A kill mid-write leaves half a line; the row names it and stays "truncated"."""
    last = random.randint(2, 8)
    text = log_then(args, last + 1, []).rstrip("\n")
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
        lines = [*args_block(run_args), iteration_line(1, 1000, args["global_batch_size"], ms, 130.0)]
        path.write_text("\n".join(lines) + "\n")
        _written_ago(path, 2 * 3600)
        assert _status(capsys, path) == status
