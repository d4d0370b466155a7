"""Command-line defects found in review: each test fails on the defect it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron.oellm.convert import output, pipeline
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.pipeline import ITERATION_FILE, RELEASE, hf_to_mcore_checkpoint, mcore_to_hf_checkpoint
from megatron.oellm.convert.safetensors_io import INDEX_NAME

UNIT = {"hf-to-mcore": "hf_to_mcore_unit", "mcore-to-hf": "mcore_to_hf_unit"}
"""The pipeline function each direction calls once per unit."""


def test_overwrite_keeps_a_users_file_inside_release(converted) -> None:
    """``--overwrite`` replaces a previous hf-to-mcore output, but ``release/`` replaced as a whole would delete a
    file the user put there (notes, an eval result): refused, naming it, and the file stays."""
    card, _, tmp = converted
    notes = tmp / "mcore" / RELEASE / "eval_results.txt"
    notes.write_text("loss 1.23\n")
    with pytest.raises(ConversionError, match=r"holds release/eval_results\.txt, which this conversion does not write"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert notes.read_text() == "loss 1.23\n"


def test_overwrite_keeps_a_training_checkpoint_under_release(converted) -> None:
    """A ``release/`` directory megatron training saved (its ``common.pt`` / ``mp_rank_00``) is not a previous output
    of the conversion: refused rather than deleted."""
    card, _, tmp = converted
    (tmp / "mcore" / RELEASE / "mp_rank_00").mkdir()
    (tmp / "mcore" / RELEASE / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"weights")
    with pytest.raises(ConversionError, match=r"holds release/mp_rank_00"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert (tmp / "mcore" / RELEASE / "mp_rank_00" / "model_optim_rng.pt").read_bytes() == b"weights"


def test_overwrite_of_a_previous_mcore_output_still_works(converted) -> None:
    """The nested check does not refuse what hf-to-mcore itself wrote."""
    card, _, tmp = converted
    summary = hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert summary.tensors_written > 0
    assert sorted(p.name for p in (tmp / "mcore").iterdir()) == ["latest_checkpointed_iteration.txt", RELEASE]


def test_a_file_named_release_is_not_a_previous_output(converted, tmp_path: Path) -> None:
    """``release`` as a plain file of the user's is not the checkpoint directory hf-to-mcore writes."""
    card, _, tmp = converted
    out = tmp / "work"
    out.mkdir()
    (out / RELEASE).write_text("v1.0 notes\n")
    with pytest.raises(ConversionError, match=r"holds release, which this conversion does not write"):
        hf_to_mcore_checkpoint(card, tmp / "hf", out, overwrite=True)
    assert (out / RELEASE).read_text() == "v1.0 notes\n"


def test_an_unreadable_index_is_one_line(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``model.safetensors.index.json`` the user may not read (a shared HF cache downloaded with another user's
    umask) is named in a :class:`ConversionError`, not a ``PermissionError`` traceback."""
    card, _, tmp = converted
    read_text = Path.read_text

    def refuse_index(self: Path, *args, **kwargs) -> str:
        if self.name == INDEX_NAME:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse_index)
    with pytest.raises(ConversionError, match=rf"cannot read .*{INDEX_NAME}.*Permission denied"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    assert not (tmp / "out").exists()


def test_hf_given_one_level_too_high_names_the_model_folder(converted) -> None:
    """``--hf`` of a Hugging Face cache entry (``models--org--name`` holding ``snapshots/<revision>/``) or of the
    folder that holds the model: the refusal names the folder with the weights instead of advising to convert
    ``.bin`` files that are not there."""
    card, _, tmp = converted
    snapshot = tmp / "models--Qwen--tiny" / "snapshots" / "0123abcd"
    snapshot.parent.mkdir(parents=True)
    (tmp / "hf").rename(snapshot)
    with pytest.raises(ConversionError, match=rf"no \*\.safetensors in .*models--Qwen--tiny; .*{snapshot}") as info:
        hf_to_mcore_checkpoint(card, tmp / "models--Qwen--tiny", tmp / "out")
    assert ".bin" not in str(info.value)
    with pytest.raises(ConversionError, match=rf"no \*\.safetensors in .*snapshots; .*{snapshot}"):
        hf_to_mcore_checkpoint(card, snapshot.parent, tmp / "out")
    assert not (tmp / "out").exists()


def test_a_bin_checkpoint_still_gets_the_transformers_advice(tmp_path: Path) -> None:
    """A folder of ``pytorch_model.bin`` files: told to convert them with transformers first."""
    from megatron.oellm.cards import get_card

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "pytorch_model.bin").write_bytes(b"\x80")
    with pytest.raises(ConversionError, match=r"convert \.bin checkpoints with transformers first"):
        hf_to_mcore_checkpoint(get_card("qwen3-30b-a3b-tiny"), tmp_path / "hf", tmp_path / "out")


def test_mcore_given_one_level_too_high_names_the_checkpoints(converted) -> None:
    """``--mcore`` of the folder holding the runs, or of a run without ``latest_checkpointed_iteration.txt``: the
    refusal names the checkpoints below it."""
    card, _, tmp = converted
    runs = tmp / "runs"
    runs.mkdir()
    (tmp / "mcore").rename(runs / "run1")
    with pytest.raises(ConversionError, match=rf"{runs} is not a megatron-core .*: {runs / 'run1'}"):
        mcore_to_hf_checkpoint(card, runs, tmp / "out")
    (runs / "run1" / ITERATION_FILE).unlink()
    (runs / "run1" / RELEASE).rename(runs / "run1" / "iter_0000010")
    with pytest.raises(ConversionError, match=rf"run1 is not a megatron-core .*: {runs / 'run1' / 'iter_0000010'}"):
        mcore_to_hf_checkpoint(card, runs / "run1", tmp / "out")
    assert not (tmp / "out").exists()


def test_mcore_given_an_hf_model_says_so(converted) -> None:
    """``--mcore`` of a Hugging Face model (the directions swapped): named as such, with the command to use."""
    card, _, tmp = converted
    with pytest.raises(ConversionError, match=rf"--mcore {tmp / 'hf'} is a Hugging Face model.*hf-to-mcore --hf"):
        mcore_to_hf_checkpoint(card, tmp / "hf", tmp / "out")
    assert not (tmp / "out").exists()


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_out_on_another_file_system_than_its_parent_is_refused_up_front(converted, direction: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``--out`` that is a mount point (a container's bind mount, a job's scratch mount) cannot receive the staging
    directory beside it by rename: refused before the conversion, and a previous output there is kept (it used to be
    deleted, then the move failed with EXDEV and the new output was removed too)."""
    card, _, tmp = converted
    out = tmp / "mounted"
    to_mcore = direction == "hf-to-mcore"
    run = (hf_to_mcore_checkpoint, tmp / "hf") if to_mcore else (mcore_to_hf_checkpoint, tmp / "mcore")
    run[0](card, run[1], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_file_system = output.file_system_of
    monkeypatch.setattr(output, "file_system_of", lambda path: real_file_system(path) + (path == out.resolve()))
    called = []
    monkeypatch.setattr(pipeline, UNIT[direction], lambda *a, **k: called.append(1))
    with pytest.raises(ConversionError, match=rf"{out} is on another file system than .*; pass a directory inside it"):
        run[0](card, run[1], out, overwrite=True)
    assert not called
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not list(tmp.glob(".mounted.partial-*"))
