"""``--max-shard-size`` below 1 MiB (``1``, ``1KiB``, ``5`` meant as 5 GB) is a usage error that says why and what
the units mean: it used to write one file per tensor (18,867 files for qwen3-30b-a3b) without a word."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cli import build_parser, main


@pytest.mark.parametrize("text", ["1", "5", "1KiB", f"{random.randint(1, 1023)}KB", "0.5MB", "1048575"])
def test_a_shard_size_below_1_mib_is_refused_with_the_reason(text: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "mcore-to-hf", "--model", "qwen3-30b-a3b-tiny", "--mcore", str(tmp_path / "in"),
              "--out", str(tmp_path / "out"), "--max-shard-size", text])
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(f"oellm convert mcore-to-hf: error: argument --max-shard-size: {text!r} is ")
    assert "below the 1MB minimum" in line and "a file per tensor" in line and "Lustre, GPFS" in line
    assert "powers of 1024 (5GB = 5 GiB" in line and "a number without a unit is bytes" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, size", [("1MB", 2**20), ("1048576", 2**20), ("1024KiB", 2**20), ("5GB", 5 * 2**30)])
def test_sizes_from_1_mib_are_read_in_powers_of_1024(text: str, size: int) -> None:
    args = build_parser().parse_args(["convert", "mcore-to-hf", "--model", "qwen3-30b-a3b-tiny", "--mcore", "in",
                                      "--out", "out", "--max-shard-size", text])
    assert args.max_shard_size == size


def test_the_help_says_what_the_units_mean(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["convert", "mcore-to-hf", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "at least 1MB (default 5GB); units are powers of 1024 (5GB = 5 GiB, 500MB = 500 MiB)" in help_text
