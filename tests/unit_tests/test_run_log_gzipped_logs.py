"""An archived, gzip-compressed log (``slurm-1234.out.gz``) was read as bytes: its row said "no arguments block (not
a Megatron log ...)". ``oellm table`` now reads it through gzip (known by its magic bytes, whatever its name), with
the line ends as written; one that is corrupt or cut says so in its row. A log given through a pipe
(``oellm table <(cat out.0 out.7)``) is read through one open: the magic-byte sniff's second open lost what the first
had buffered. Fresh random step times."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import random
import threading

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import read_log
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 \n"


def _text() -> str:
    """A generated, finished 8-node log of the strong-scaling recipe; a progress bar's lone CR in its noise."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    text = megatron_log(args, times, [round(random.uniform(100, 140), 1) for _ in times], tail=DONE)
    return text.replace("> building datasets ...", "> building datasets ... 10%\r 100%")


def _csv_row(capsys, path) -> str:
    """The CSV row of ``oellm table PATH`` less its path (the row's log and, as its own baseline, its baseline_log)."""
    assert main(["table", str(path), "--format", "csv"]) == 0
    return capsys.readouterr().out.splitlines()[1].replace(str(path), "")


def test_a_gzipped_log_gives_the_plain_logs_row(tmp_path, capsys):
    text = _text()
    plain, packed = tmp_path / "slurm-1234.out", tmp_path / random.choice(["slurm-1234.out.gz", "slurm-1234.log"])
    plain.write_text(text, newline="")
    packed.write_bytes(gzip.compress(text.encode()))
    row = _csv_row(capsys, packed)
    assert row.startswith(",qwen3.5-35b-a3b,ok,8,32,") and row == _csv_row(capsys, plain)
    assert read_log(packed).runs[-1].line_span == read_log(plain).runs[-1].line_span  # the CR ends no line


def test_a_cut_gzip_file_says_so_in_its_row(tmp_path, capsys):
    data = gzip.compress(_text().encode())
    cut = tmp_path / "slurm-1234.out.gz"
    cut.write_bytes(data[:random.randint(len(data) // 4, len(data) - 20)])
    assert main(["table", str(cut)]) == 1
    status = next(line for line in capsys.readouterr().out.splitlines() if ".out.gz |" in line)
    assert "| log not readable: gzip-compressed but corrupt or cut (" in status
    assert status.endswith("'gunzip -c' shows what is left of it, give that as the log |")


COMPRESSIONS = {"xz": (lzma.compress, "xz -dc"), "bzip2": (bz2.compress, "bzip2 -dc")}
"""Name -> (compress, the command the row names for a cut file) of the other compressions archived logs come in."""


@pytest.mark.parametrize("name", COMPRESSIONS)
def test_an_xz_or_bzip2_log_gives_the_plain_logs_row(tmp_path, capsys, name):
    """They read as bytes too: "no arguments block (not a Megatron log ...)"."""
    text = _text()
    compress, command = COMPRESSIONS[name]
    plain, packed = tmp_path / "slurm-1234.out", tmp_path / random.choice(["slurm-1234.out.packed", "slurm-1234.log"])
    plain.write_text(text, newline="")
    packed.write_bytes(compress(text.encode()))
    row = _csv_row(capsys, packed)
    assert row.startswith(",qwen3.5-35b-a3b,ok,8,32,") and row == _csv_row(capsys, plain)
    data = packed.read_bytes()
    packed.write_bytes(data[:random.randint(len(data) // 4, len(data) - 20)])
    assert main(["table", str(packed)]) == 1
    status = next(line for line in capsys.readouterr().out.splitlines() if f"{packed.name} |" in line)
    assert f"| log not readable: {name}-compressed but corrupt or cut (" in status
    assert status.endswith(f"'{command}' shows what is left of it, give that as the log |")


def _fed_through_a_pipe(data: bytes) -> tuple[int, threading.Thread]:
    """The read end of a pipe that a thread writes ``data`` into and then closes, as the shell's ``<(cat LOG)`` does.
    The writer never blocks the test for good: it stops at a closed read end (BrokenPipeError)."""
    read_end, write_end = os.pipe()

    def feed() -> None:
        with open(write_end, "wb") as pipe, contextlib.suppress(BrokenPipeError):
            pipe.write(data)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    return read_end, feeder


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd, as a shell's process substitution does")
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_log_through_a_pipe_gives_the_regular_files_row(tmp_path, capsys, packed):
    """``oellm table <(cat LOG)``: the magic-byte sniff opened the pipe, buffered its first bytes and closed it; the
    parse's second open read the rest ("no arguments block before the iteration lines", or a gzip "corrupt or cut")."""
    text = _text()
    plain = tmp_path / "slurm-1234.out"
    plain.write_text(text, newline="")
    read_end, feeder = _fed_through_a_pipe(gzip.compress(text.encode()) if packed else text.encode())
    try:
        row = _csv_row(capsys, f"/dev/fd/{read_end}")
    finally:
        os.close(read_end)
        feeder.join()
    assert row.startswith(",qwen3.5-35b-a3b,ok,8,32,") and row == _csv_row(capsys, plain)
