"""A log file read from disk, plain or gzip-compressed, keeps its line ends as written: a progress bar's lone ``\\r``
and CRLF line ends are in the text ``log_text`` returns, and line numbers count ``\\n`` only, as ``grep -n`` does (a
text-mode read that translated line ends made each ``\\r`` a line and moved every later line number). One fixed log,
so that the layout tested is the same every session."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from megatron.oellm.run_log import log_text, read_log
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "
TIME_LIMIT = "slurmstepd: error: *** JOB 77 ON gs01r1b01 CANCELLED AT 2026-11-30T12:00:00 DUE TO TIME LIMIT ***"
BAR_STATES = 37
"""States of the fixed progress bar, redrawn with ``\\r`` on one line."""


def _start(args: dict, last: int) -> list[str]:
    """One start of the program: the arguments block, a progress bar on one line, iteration lines 1..``last``."""
    bar = "\r".join(f"building index: {k:3d}/{BAR_STATES}" for k in range(1, BAR_STATES + 1))
    return [*args_block(args), "> building datasets ...", bar,
            *(iteration_line(i, 10, args["global_batch_size"], 71_000.0 + 13.0 * i, 130.0) for i in range(1, last + 1))]


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_carriage_returns_and_crlf_ends_are_kept(compressed: bool, tmp_path: Path) -> None:
    """A finished start (its progress bar redrawn with ``\\r``, every line ending CRLF), then a requeued start the
    time limit stopped: the text read is the file's, and the first start spans exactly its lines."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 10})
    first = [*_start(args, 10), DONE]
    second = [*_start(args, 6), TIME_LIMIT]
    text = "\r\n".join(first + second) + "\r\n"
    path = tmp_path / ("slurm-77.out.gz" if compressed else "slurm-77.out")
    data = text.encode()
    path.write_bytes(gzip.compress(data) if compressed else data)
    assert log_text(path) == text
    runs = read_log(path).runs
    assert [run.line_span for run in runs] == [(1, len(first)), (len(first) + 1, len(first) + len(second))]
