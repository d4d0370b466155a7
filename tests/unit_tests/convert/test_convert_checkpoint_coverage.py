"""The coverage check of checkpoint chunks in mcore-to-hf: a ``.metadata`` that leaves part of a tensor, one expert's
chunk or a whole tensor out is refused before anything is written, naming what has no data.

Planning a read scans every chunk the checkpoint stores for a tensor, and a layer-stacked expert tensor stores one
chunk per (layer, expert) (6,144 for Qwen3-30B-A3B, 12,032 for Qwen3-235B-A22B). Checked once per piece, the export's
planning pass scanned pieces x chunks (measured: ~3.5 minutes for Qwen3-30B-A3B, ~14 for Qwen3-235B-A22B, before any
data was read); each unit's pieces of one tensor are now checked as one region, and a gap is still named by the piece
it belongs to."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest

from megatron.oellm.convert import dist_ckpt
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import units
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint

EXPERT_KEYS = ("decoder.layers.mlp.experts.experts.linear_fc1.weight",
               "decoder.layers.mlp.experts.experts.linear_fc2.weight")


def test_each_pass_plans_one_read_per_tensor_and_unit(converted, monkeypatch) -> None:
    """The planning pass and the export each plan one read per checkpoint tensor per unit, not one per piece (each
    plan scans all of the tensor's stored chunks)."""
    card, _, tmp = converted
    plans: Counter[str] = Counter()
    plan_reads = dist_ckpt.create_read_items_for_chunk_list

    def counting(key, stored, chunks):
        plans[key] += 1
        return plan_reads(key, stored, chunks)

    monkeypatch.setattr(dist_ckpt, "create_read_items_for_chunk_list", counting)
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    layers = len(units(card)) - 2  # the embedding and head units hold no expert
    for key in EXPERT_KEYS:
        assert plans[key] == 2 * layers, (key, plans[key], card.num_experts)


def test_a_missing_expert_chunk_is_named_by_its_expert(converted) -> None:
    """A ``.metadata`` without one (layer, expert) chunk of a stacked expert tensor is refused before anything is
    written, naming that expert's state-dict tensor."""
    card, _, tmp = converted
    layer, expert = random.randrange(card.num_layers), random.randrange(card.num_experts)
    key = random.choice(EXPERT_KEYS)
    path = tmp / "mcore" / "release" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    stored = metadata.state_dict_metadata[key]
    gap = [chunk for chunk in stored.chunks if tuple(chunk.offsets[:2]) == (layer, expert)]
    stored.chunks = [chunk for chunk in stored.chunks if tuple(chunk.offsets[:2]) != (layer, expert)]
    metadata.storage_data = {index: info for index, info in metadata.storage_data.items()
                             if not (index.fqn == key and tuple(index.offset[:2]) == (layer, expert))}
    path.write_bytes(pickle.dumps(metadata))
    elements = sum(chunk.sizes.numel() for chunk in gap)
    fc = key.rsplit(".", 2)[-2]
    with pytest.raises(ConversionError, match=rf"no data for {elements} of the {elements} elements of "
                                              rf"decoder\.layers\.{layer}\.mlp\.experts\.{fc}\.weight{expert} "):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


def test_a_checkpoint_without_a_whole_tensor_is_refused_in_the_planning_pass(converted) -> None:
    """A ``.metadata`` without one of the tensors the card needs (a fresh random one each run; a checkpoint of another
    model, or a damaged one) is a :class:`ConversionError` naming it and the state-dict tensor it was read for, from
    the planning pass, before anything is written: not a ``KeyError`` from DCP's metadata."""
    card, _, tmp = converted
    path = tmp / "mcore" / "release" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    key = random.choice(sorted(key for key in metadata.state_dict_metadata if key.startswith("decoder.")))
    del metadata.state_dict_metadata[key]
    metadata.storage_data = {index: info for index, info in metadata.storage_data.items() if index.fqn != key}
    path.write_bytes(pickle.dumps(metadata))
    with pytest.raises(ConversionError, match=rf"missing tensor '{key}' \(for \S+\)"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


def test_checkpoint_data_the_metadata_does_not_cover_is_refused(converted) -> None:
    """A ``.metadata`` whose chunks leave part of a tensor out (here a random layer's slice of a layer-stacked
    Qwen3-MoE tensor) gave no data for it: the export used to write the read buffer's uninitialised memory there and
    exit 0; it is refused before anything is written."""
    card, _, tmp = converted
    layer = random.randrange(card.num_layers)
    key = "decoder.layers.pre_mlp_layernorm.weight"
    path = tmp / "mcore" / "release" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    stored = metadata.state_dict_metadata[key]
    stored.chunks = [chunk for chunk in stored.chunks if chunk.offsets[0] != layer]
    metadata.storage_data = {index: info for index, info in metadata.storage_data.items()
                             if not (index.fqn == key and index.offset[0] == layer)}
    path.write_bytes(pickle.dumps(metadata))
    with pytest.raises(ConversionError, match=rf"no data for {card.hidden_size} of the {card.hidden_size} elements "
                                              rf"of decoder\.layers\.{layer}\.pre_mlp_layernorm\.weight"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


def test_a_region_missing_a_single_element_is_refused() -> None:
    """Chunks covering all but the last element of a random-length vector (n - 1 of n): that one element would keep
    the read buffer's uninitialised memory, so the region is refused, counting 1 missing element of n."""
    import torch
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        TensorProperties,
        TensorStorageMetadata,
    )

    n = random.randrange(3, 1000)
    stored = TensorStorageMetadata(properties=TensorProperties(dtype=torch.float32), size=torch.Size([n]),
                                   chunks=[ChunkStorageMetadata(offsets=torch.Size([0]), sizes=torch.Size([n - 1]))])
    metadata = Metadata(state_dict_metadata={"w": stored})
    with pytest.raises(ConversionError, match=rf"no data for 1 of the {n} elements of layer\.w"):
        dist_ckpt.region_read_items(metadata, "w", (0,), (n,), "layer.w")
    assert sum(item.lengths[0] for item in dist_ckpt.region_read_items(metadata, "w", (0,), (n - 1,), "layer.w")) == n - 1
