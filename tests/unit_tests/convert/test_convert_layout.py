"""Sharded keys of the megatron-core checkpoint, and that writing streams one unit at a time."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from megatron.oellm.cards import get_card
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.dist_ckpt import CheckpointReader, save_streaming
from megatron.oellm.convert.family import family_module, iter_hf_to_mcore, units
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors


def test_gpt_layer_and_expert_axes() -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    (piece,) = mcore_layout.pieces(card, "gpt", "decoder.layers.1.mlp.experts.linear_fc1.weight5", (64, 64))
    assert piece.key == "decoder.layers.mlp.experts.experts.linear_fc1.weight"
    assert piece.global_shape == (card.num_layers, card.num_experts, 64, 64)
    assert piece.offset == (1, 5, 0, 0) and piece.chunk_shape == (1, 1, 64, 64)
    (norm,) = mcore_layout.pieces(card, "gpt", "decoder.final_layernorm.weight", (64,))
    assert (norm.key, norm.global_shape) == ("decoder.final_layernorm.weight", (64,))


def test_hybrid_keeps_layer_keys_and_splits_gdn() -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    (piece,) = mcore_layout.pieces(card, "hybrid", "decoder.layers.3.mlp.experts.linear_fc2.weight7", (64, 32))
    assert (piece.key, piece.global_shape, piece.offset) == ("decoder.layers.3.mlp.experts.experts.linear_fc2.weight",
                                                              (card.num_experts, 64, 32), (7, 0, 0))
    qk, v, heads = 2 * 16, 4 * 16, 4
    sections = mcore_layout.pieces(card, "hybrid", "decoder.layers.0.self_attention.in_proj.weight",
                                   (2 * qk + 2 * v + 2 * heads, 64))
    assert [(p.key.rsplit(".", 1)[1], p.global_shape[0], p.rows) for p in sections] == [
        ("query", qk, (0, qk)), ("key", qk, (qk, 2 * qk)), ("value", v, (2 * qk, 2 * qk + v)),
        ("z", v, (2 * qk + v, 2 * qk + 2 * v)), ("beta", heads, (2 * qk + 2 * v, 2 * qk + 2 * v + heads)),
        ("alpha", heads, (2 * qk + 2 * v + heads, 2 * qk + 2 * v + 2 * heads))]


@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_writer_streams_one_unit_at_a_time(name: str, tmp_path: Path) -> None:
    """Each unit is produced once, in order, and earlier units' storage is freed before the next is produced
    (at most one view, the writer's last item, may outlive its unit briefly)."""
    card = get_card(name)
    model = family_module(card).MCORE_MODEL
    hf = random_hf_tensors(card, seed=9)
    expected = {unit: {k: v.clone() for k, v in tensors.items()} for unit, tensors in iter_hf_to_mcore(card, hf)}
    chunks, unit_of = [], {}
    for unit, tensors in expected.items():
        for tensor_name, tensor in tensors.items():
            unit_of[tensor_name] = unit
            chunks += [(p, tensor.dtype) for p in mcore_layout.pieces(card, model, tensor_name, tuple(tensor.shape))]
    produced, alive = [], []

    def produce(unit):
        gc.collect()
        earlier = [ref for u, ref in alive if u != produced[-1] and not ref.expired()] if produced else []
        assert len(earlier) <= 1, f"{len(earlier)} tensors of earlier units still held when producing {unit}"
        produced.append(unit)
        tensors = {k: v.clone() for k, v in expected[unit].items()}
        alive.extend((unit, StorageWeakRef(t.untyped_storage())) for t in tensors.values())
        return tensors

    save_streaming(tmp_path / "ckpt", chunks, unit_of, produce, {"iteration": 0})
    assert produced == units(card)
    reader = CheckpointReader(tmp_path / "ckpt")
    assert reader.common_state()["iteration"] == 0
    everything = {k: t for tensors in expected.values() for k, t in tensors.items()}
    assert_bitwise_equal(everything, reader.read([p for p, _ in chunks]))
    assert {dtype for _, dtype in reader.tensor_shapes().values()} == {torch.bfloat16}
