"""A zstd-compressed log (``slurm-1234.out.zst``, as ``zstd`` or an archiving script writes it) was read as bytes: "no
arguments block (not a Megatron log ...)". Python 3.11's standard library reads no zstd, so ``oellm table`` reads it
through Python 3.14's ``compression.zstd`` or the ``zstandard`` package, and without either says so in the row,
naming both fixes. Fresh random step times and bytes."""

from __future__ import annotations

import csv
import importlib
import io
import random
import sys

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame."""

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 \n"


def _text() -> str:
    """A generated, finished 8-node log of the strong-scaling recipe."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    return megatron_log(args, times, [round(random.uniform(100, 140), 1) for _ in times], tail=DONE)


def _row(capsys, path) -> tuple[int, dict[str, str]]:
    """The exit status and the CSV row, less its path (its log and, as its own baseline, its baseline_log), of
    ``oellm table PATH``."""
    status = main(["table", str(path), "--format", "csv"])
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    return status, {name: value for name, value in row.items() if value != str(path)}


def test_without_a_zstd_decompressor_the_row_names_the_fixes(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # an import of it fails
    monkeypatch.setitem(sys.modules, "compression.zstd", None)
    packed = tmp_path / random.choice(["slurm-1234.out.zst", "slurm-1234.log"])
    packed.write_bytes(ZSTD_MAGIC + random.randbytes(random.randint(64, 256)))
    status, row = _row(capsys, packed)
    assert status == 1 and row["status"] == (
        "log not readable: zstd-compressed, and this Python has no zstd decompressor (Python 3.14's compression.zstd, "
        "or the zstandard package): 'pip install zstandard', or give the log 'zstd -d FILE' writes")


def _importable(module: str) -> bool:
    """``module`` imports in this Python (``compression.zstd`` from Python 3.14 on, ``zstandard`` where installed)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("module", [
    pytest.param("compression.zstd", marks=pytest.mark.skipif(not _importable("compression.zstd"),
                                                              reason="needs Python 3.14's compression.zstd")),
    pytest.param("zstandard", marks=pytest.mark.skipif(not _importable("zstandard"),
                                                       reason="the zstandard package is not installed")),
])
def test_a_two_frame_zstd_log_gives_the_plain_logs_row(tmp_path, capsys, monkeypatch, module):
    """Read through ``module``, the other one hidden (Python 3.14 with ``zstandard`` installed reads through
    ``compression.zstd``: the frame-by-frame reading of ``zstandard`` runs only without it). Neither imports on
    Python 3.11 without ``zstandard``: there both cases are skipped."""
    zstd = importlib.import_module(module)
    monkeypatch.setitem(sys.modules, "compression.zstd" if module == "zstandard" else "zstandard", None)
    text = _text()
    plain, packed = tmp_path / "slurm-1234.out", tmp_path / "slurm-1234.out.zst"
    plain.write_text(text, newline="")
    first = zstd.compress(text[:len(text) // 2].encode())
    data = first + zstd.compress(text[len(text) // 2:].encode())
    packed.write_bytes(data)  # two frames, as ``cat a.zst b.zst`` joins them
    status, row = _row(capsys, packed)
    assert status == 0 and row["status"] == "ok" and (status, row) == _row(capsys, plain)
    packed.write_bytes(data[:random.randint(len(first) + 1, len(data) - 1)])  # cut inside the second frame
    status, row = _row(capsys, packed)
    assert status == 1 and row["status"].startswith("log not readable: zstd-compressed but corrupt or cut (")
    assert row["status"].endswith("'zstd -dc' shows what is left of it, give that as the log")
