"""What ``--hf`` and ``--mcore`` point at: an input that is unreadable, one folder level too high, of the other
direction or of ``.bin`` files is refused in one line naming the folder to pass (or the command to use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE, RELEASE
from megatron.oellm.convert.safetensors_io import INDEX_NAME
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint


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
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "pytorch_model.bin").write_bytes(b"\x80")
    with pytest.raises(ConversionError, match=r"it holds PyTorch \.bin weights \(pytorch_model\.bin\): convert them to "
                                              "safetensors with transformers first"):
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


def test_a_torch_format_checkpoint_is_named_as_such(tiny_hf) -> None:
    """``--mcore`` of a run saved with ``--ckpt-format torch`` (one ``mp_rank_*`` file per model-parallel rank): the
    refusal names the format and megatron's re-save to ``torch_dist``, instead of asking for the directory that holds
    ``metadata.json`` (the user gave the right one)."""
    import torch

    card, hf, tmp = tiny_hf
    rank = tmp / "run" / "iter_0000010" / "mp_rank_00"
    rank.mkdir(parents=True)
    torch.save({"model": {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"]}},
               rank / "model_optim_rng.pt")
    (tmp / "run" / ITERATION_FILE).write_text("10\n")
    for given in (tmp / "run", rank.parent):
        with pytest.raises(ConversionError, match=r"iter_0000010 is a --ckpt-format torch checkpoint .*"
                                                  r"--ckpt-convert-format torch_dist") as info:
            mcore_to_hf_checkpoint(card, given, tmp / "out")
        assert "metadata.json" not in str(info.value)
    assert not (tmp / "out").exists()


def test_a_dcp_checkpoint_without_megatron_metadata_is_named_as_such(tiny_hf) -> None:
    """``--mcore`` of a run saved with ``--ckpt-format torch_dcp`` (or Megatron-FSDP's ``fsdp_dtensor``): PyTorch DCP
    files without megatron's ``metadata.json``, the model under ``model.`` keys. megatron-core tells the formats apart
    by that file; the refusal names the format, not a missing tensor the checkpoint holds under another key."""
    import torch.distributed.checkpoint as dcp

    card, hf, tmp = tiny_hf
    model = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
             "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    dcp.save({"model": model, "iteration": 10}, storage_writer=dcp.FileSystemWriter(tmp / "run" / "iter_0000010"),
             no_dist=True)
    (tmp / "run" / ITERATION_FILE).write_text("10\n")
    with pytest.raises(ConversionError, match=r"iter_0000010 .*no metadata.json.*torch_dcp.*"
                                              r"--ckpt-convert-format torch_dist") as info:
        mcore_to_hf_checkpoint(card, tmp / "run", tmp / "out")
    assert "missing tensor" not in str(info.value)
    assert not (tmp / "out").exists()
