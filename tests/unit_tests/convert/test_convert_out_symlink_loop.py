"""A loop of symbolic links in ``--out``, or in a folder above it, is one ``error:`` line naming ``--out`` and exit 2
in both directions: it was a ``RuntimeError: Symlink loop`` traceback and exit 1."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main


def _loop(tmp_path: Path, form: str) -> Path:
    """An ``--out`` that runs into a loop: a link to itself, or a folder below a link to itself."""
    name = f"loop{random.randrange(10**6)}"
    if form == "itself":
        (tmp_path / name).symlink_to(name)
        return tmp_path / name
    (tmp_path / "parent").mkdir()
    (tmp_path / "parent" / name).symlink_to(name)
    return tmp_path / "parent" / name / "sub"


@pytest.mark.parametrize("form", ["itself", "parent"])
@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_symlink_loop_in_out_is_one_error_line(converted, capsys: pytest.CaptureFixture, form: str,
                                                 direction: str) -> None:
    card, _, tmp = converted
    out = _loop(tmp, form)
    source = ["--hf", str(tmp / "hf")] if direction == "hf-to-mcore" else ["--mcore", str(tmp / "mcore")]
    capsys.readouterr()
    assert main(["convert", direction, "--model", card.name, *source, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"oellm convert {direction}: error: --out {out} runs into a loop of symbolic links")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
