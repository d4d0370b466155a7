"""``--overwrite`` never loses the previous output: when moving the new output into ``--out`` fails half-way (a
permission, a full metadata server), the previous output's entries are put back byte for byte and the error says so;
if putting them back fails too, nothing is deleted and the error names where each part is."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.convert import output
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _fresh_hf(card: ModelCard, directory: Path) -> Path:
    """An HF checkpoint of fresh random weights in ``directory``."""
    return write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), directory)


def _convert_twice(direction: str, tmp: Path, card: ModelCard) -> tuple[Path, Callable[[], object]]:
    """Write a first output into ``tmp/out`` and return it with a call that converts other fresh weights over it."""
    out = tmp / "out"
    if direction == "hf-to-mcore":
        hf_to_mcore_checkpoint(card, _fresh_hf(card, tmp / "hf1"), out)
        second = _fresh_hf(card, tmp / "hf2")
        return out, lambda: hf_to_mcore_checkpoint(card, second, out, overwrite=True)
    for name in ("1", "2"):
        hf_to_mcore_checkpoint(card, _fresh_hf(card, tmp / f"hf{name}"), tmp / f"mcore{name}")
    mcore_to_hf_checkpoint(card, tmp / "mcore1", out)
    return out, lambda: mcore_to_hf_checkpoint(card, tmp / "mcore2", out, overwrite=True)


def _fail_moves(monkeypatch: pytest.MonkeyPatch, out: Path, fail_back: bool) -> None:
    """Make the second move of a new entry from the staging directory into ``out`` fail with EACCES (the first
    succeeds: the failure is half-way); with ``fail_back`` every later move back fails too."""
    rename = Path.rename
    staging = output.staging_directory(out.resolve())
    moved_in: list[Path] = []

    def failing(self: Path, target: Path) -> Path:
        target = Path(target)
        moving_in = self.parent == staging and target.parent == out.resolve()
        if (moving_in and len(moved_in) == 1) or (fail_back and moved_in and not moving_in):
            raise PermissionError(13, "Permission denied", str(target))
        if moving_in:
            moved_in.append(target)
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_failed_move_puts_the_previous_output_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     direction: str) -> None:
    card = get_card(random.choice(["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]))
    out, convert_again = _convert_twice(direction, tmp_path, card)
    before = _files(out)
    _fail_moves(monkeypatch, out, fail_back=False)
    with pytest.raises(ConversionError, match=r"cannot move the output into .*Permission denied.*; the previous output "
                                              r"is back in place, unchanged, and the new output was removed$"):
        convert_again()
    assert _files(out) == before
    assert sorted(p.name for p in out.iterdir()) == sorted({path.parts[0] for path in before})
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_when_putting_it_back_fails_too_nothing_is_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           direction: str) -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    out, convert_again = _convert_twice(direction, tmp_path, card)
    before = _files(out)
    _fail_moves(monkeypatch, out, fail_back=True)
    trash, staging = output.trash_directory(out.resolve()), output.staging_directory(out.resolve())
    with pytest.raises(ConversionError, match=rf"putting the previous output back failed too .*Nothing was deleted: "
                                              rf"the previous output's entries missing from .* are in {trash}, the new "
                                              rf"output's entries missing from .* are in {staging}; move them by hand"):
        convert_again()
    assert _files(trash) == before  # every previous entry was moved aside before the first new one went in
    assert len(list(out.iterdir())) == 1 and any(staging.iterdir())  # the new output: one entry in, the rest staged
