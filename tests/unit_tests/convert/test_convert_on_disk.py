"""HF safetensors -> megatron-core distributed checkpoint -> HF safetensors, through files, and the input checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from convert_helpers import assert_bitwise_equal, fuse_experts, random_hf_tensors, write_hf

from megatron.oellm.cards import get_card
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.pipeline import (
    CARD_KEY,
    ITERATION_FILE,
    RELEASE,
    hf_to_mcore_checkpoint,
    mcore_to_hf_checkpoint,
)
from megatron.oellm.convert.safetensors_io import INDEX_NAME, SafetensorsSource, ShardedSafetensorsWriter

TINY_CARDS = ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"]


@pytest.mark.parametrize("name", TINY_CARDS)
def test_round_trip_through_files_is_bit_exact_and_loads_in_transformers(name: str, tmp_path: Path) -> None:
    card = get_card(name)
    hf = random_hf_tensors(card, seed=3)
    write_hf(card, hf, tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert (tmp_path / "mcore" / ITERATION_FILE).read_text().strip() == RELEASE
    reader = CheckpointReader(tmp_path / "mcore" / RELEASE)
    assert reader.common_state()[CARD_KEY]["name"] == card.name
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out", max_shard_bytes=200_000)
    assert (tmp_path / "out" / INDEX_NAME).is_file()
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))
    model = getattr(transformers, card.hf_architecture).from_pretrained(tmp_path / "out", dtype=torch.bfloat16)
    assert_bitwise_equal(fuse_experts(card, hf), dict(model.state_dict()))


def test_published_layout_is_read(tmp_path: Path) -> None:
    """``model.language_model.`` names, fused experts, vision and MTP tensors (skipped), nested text_config."""
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=4)
    published = {("model.language_model." + n[len("model."):] if n.startswith("model.") else n): t
                 for n, t in fuse_experts(card, hf).items()}
    published["model.visual.patch_embed.proj.weight"] = torch.randn(4, 4)
    published["mtp.fc.weight"] = torch.randn(4, 4)
    writer = ShardedSafetensorsWriter(tmp_path / "hf")
    writer.add(published)
    writer.close()
    config = family_module(card).hf_config_from_card(card).to_dict()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"text_config": config}))
    summary = hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert summary.skipped == ["model.visual.patch_embed.proj.weight", "mtp.fc.weight"]
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


@pytest.fixture
def tiny_hf(tmp_path: Path):
    card = get_card("qwen3-30b-a3b-tiny")
    return card, random_hf_tensors(card, seed=5), tmp_path


def test_missing_tensor_fails_before_writing(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    del hf["model.layers.1.mlp.experts.3.up_proj.weight"]
    write_hf(card, hf, tmp / "hf")
    with pytest.raises(ConversionError, match=r"missing tensor 'model\.layers\.1\.mlp\.experts\.3\.up_proj\.weight'"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert not (tmp / "mcore").exists()


def test_shape_mismatch_names_tensor_and_card(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    hf["model.layers.0.self_attn.k_proj.weight"] = torch.randn(32, card.hidden_size, dtype=torch.bfloat16)
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / "config.json").unlink()
    with pytest.raises(ConversionError, match=r"k_proj\.weight' has shape \[32, 64\], card qwen3-30b-a3b-tiny"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")


def test_config_of_another_model_is_rejected(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    with pytest.raises(ConversionError, match="num_hidden_layers"):
        hf_to_mcore_checkpoint(get_card("qwen3-30b-a3b-proxy-4L"), tmp / "hf", tmp / "mcore")


def test_non_empty_output_needs_overwrite(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "mcore").mkdir()
    (tmp / "mcore" / "keep.txt").write_text("x")
    with pytest.raises(ConversionError, match="--overwrite"):
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    assert (tmp / "mcore" / "keep.txt").exists()
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore", overwrite=True)
    assert not (tmp / "mcore" / "keep.txt").exists()


def test_bad_paths_are_clear_errors(tmp_path: Path) -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    with pytest.raises(ConversionError, match="not a directory"):
        hf_to_mcore_checkpoint(card, tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match=r"no \*\.safetensors"):
        hf_to_mcore_checkpoint(card, tmp_path / "empty", tmp_path / "out")
    with pytest.raises(ConversionError, match="not a megatron-core distributed checkpoint"):
        mcore_to_hf_checkpoint(card, tmp_path / "empty", tmp_path / "out")


def test_mcore_checkpoint_of_another_card_is_rejected(tiny_hf) -> None:
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    with pytest.raises(ConversionError, match="num_layers"):
        mcore_to_hf_checkpoint(get_card("qwen3-30b-a3b-proxy-4L"), tmp / "mcore", tmp / "out")
