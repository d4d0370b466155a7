"""An archived, gzip-compressed log (``slurm-1234.out.gz``) was read as bytes: its row said "no arguments block (not
a Megatron log ...)". ``oellm table`` now reads it through gzip (known by its magic bytes, whatever its name), with
the line ends as written; one that is corrupt or cut says so in its row. Fresh random step times."""

from __future__ import annotations

import gzip
import random

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
