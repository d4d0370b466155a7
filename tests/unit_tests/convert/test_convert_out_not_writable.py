"""An existing ``--out`` this user cannot write, or (with ``--overwrite``) a previous output's directory in it that
cannot be moved away and emptied, is refused before the conversion starts: it used to be found only when the
finished output was moved in, after minutes to hours of work."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert import to_mcore
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import RELEASE
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def previous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list]:
    """(an HF checkpoint of fresh weights, a previous hf-to-mcore output of it, the units converted from now on)."""
    card = get_card("qwen3-30b-a3b-tiny")
    hf = write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, hf, tmp_path / "out")
    converted: list = []
    unit = to_mcore.hf_to_mcore_unit
    monkeypatch.setattr(to_mcore, "hf_to_mcore_unit", lambda *args: converted.append(args[1]) or unit(*args))
    return hf, tmp_path / "out", converted


def _deny_writes_to(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    """``os.access`` answers no to writing ``denied`` (as for a user without permission: root passes chmod)."""
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (not (mode & os.W_OK and Path(path) == denied)
                                                                  and access(path, mode, **kw)))


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_out_directory_that_cannot_be_written_is_refused_up_front(previous, monkeypatch: pytest.MonkeyPatch,
                                                                     overwrite: bool) -> None:
    hf, out, converted = previous
    before = _files(out)
    if not overwrite:
        shutil.rmtree(out)  # an empty --out: filled without --overwrite
        out.mkdir()
    _deny_writes_to(monkeypatch, out.resolve())
    with pytest.raises(ConversionError, match=rf"^cannot write into the output directory {out.resolve()} \(no write "
                                              r"permission .*\); make it writable \(chmod u\+w\) or choose another"):
        hf_to_mcore_checkpoint(get_card("qwen3-30b-a3b-tiny"), hf, out, overwrite=overwrite)
    assert converted == []
    assert _files(out) == (before if overwrite else {})
    assert sorted(p.name for p in out.parent.iterdir()) == ["hf", "out"]


def test_a_previous_output_directory_that_cannot_be_emptied_is_refused_up_front(previous,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    hf, out, converted = previous
    before = _files(out)
    _deny_writes_to(monkeypatch, (out / RELEASE).resolve())
    with pytest.raises(ConversionError, match=rf"^--overwrite cannot replace {out.resolve() / RELEASE}: this user may "
                                              "not write to that directory"):
        hf_to_mcore_checkpoint(get_card("qwen3-30b-a3b-tiny"), hf, out, overwrite=True)
    assert converted == []
    assert _files(out) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory; the os.access tests cover it")
def test_a_read_only_out_directory_is_refused_up_front(previous) -> None:
    hf, out, converted = previous
    before = _files(out)
    out.chmod(0o555)
    try:
        with pytest.raises(ConversionError, match="cannot write into the output directory"):
            hf_to_mcore_checkpoint(get_card("qwen3-30b-a3b-tiny"), hf, out, overwrite=True)
    finally:
        out.chmod(0o755)
    assert converted == []
    assert _files(out) == before
