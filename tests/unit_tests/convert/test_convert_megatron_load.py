"""A converted checkpoint loads with megatron-core's own loader (``dist_checkpointing.load``, gloo, CPU).

The sharded state dicts here are built the way the models' ``sharded_state_dict()`` builds them, with megatron's
helpers (``make_sharded_tensors_for_checkpoint``, ``apply_swiglu_sharded_factory``, the GDN split factory), wired
as ``TransformerBlock`` / ``HybridStack`` / ``TEGroupedMLP`` / ``GatedDeltaNet`` wire them. World size 1 loads the
whole model (TP=PP=EP=1); two spawned ranks load TP=2 shards, which must be the row blocks of the TP=1 tensors.
"""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from convert_helpers import random_hf_tensors, write_hf

from megatron.oellm.cards import get_card
from megatron.oellm.convert.family import family_module, hf_to_mcore
from megatron.oellm.convert.pipeline import RELEASE, hf_to_mcore_checkpoint
from megatron.oellm.runtime import free_port

TP_AXIS = {"linear_qkv.weight": 0, "linear_proj.weight": 1, "in_proj.weight": 0, "out_proj.weight": 1,
           "linear_fc1.weight": 0, "linear_fc2.weight": 1, "conv1d.weight": 0, "A_log": 0, "dt_bias": 0,
           "word_embeddings.weight": 0, "output_layer.weight": 0}
"""Tensor-parallel axis of each TP-sharded parameter (megatron's column / row parallel layers)."""



def _sharded(card, name: str, local: torch.Tensor, key: str, offsets: list, tp: tuple[int, int]):
    """One parameter as its module would shard it: ``offsets`` (layer / expert axes) then the TP axis."""
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.ssm.utils import _split_tensor_factory
    from megatron.core.transformer.mlp import apply_swiglu_sharded_factory

    rank, size = tp
    axis = _sharded_axis(name)
    tp_offset = [] if axis is None or size == 1 else [(len(offsets) + axis, rank, size)]
    replica_id = (0, rank if axis is None else 0, 0)  # replicated over TP: one writer, the others replicas
    sh_ten = ShardedTensor.from_rank_offsets(key, local, *offsets, *tp_offset, replica_id=replica_id,
                                             prepend_axis_num=len(offsets))
    if re.search(r"(experts|shared_experts)\.linear_fc1\.weight$", key):
        return apply_swiglu_sharded_factory(sh_ten, tuple(offsets), tp_group=dist.group.WORLD,
                                            dp_group=dist.group.WORLD)
    if name.endswith("self_attention.in_proj.weight"):
        return _split_tensor_factory(sh_ten, *_gdn_sections(card, size), 0)
    if name.endswith("self_attention.conv1d.weight"):
        return _split_tensor_factory(sh_ten, _gdn_sections(card, size)[0][:3], ["query", "key", "value"], 0)
    return sh_ten


def _gdn_sections(card, tp: int) -> tuple[list[int], list[str]]:
    """TP-local GDN ``in_proj`` sections and their names, as ``GatedDeltaNet`` splits them."""
    qk = card.linear_num_key_heads * card.linear_key_head_dim // tp
    v = card.linear_num_value_heads * card.linear_value_head_dim // tp
    heads = card.linear_num_value_heads // tp
    return [qk, qk, v, v, heads, heads], ["query", "key", "value", "z", "beta", "alpha"]


def megatron_sharded_state_dict(card, mcore: dict, model: str, tp: tuple[int, int] = (0, 1)) -> dict:
    """Empty buffers for every (TP-local) tensor under megatron's sharded keys, like ``model.sharded_state_dict()``."""
    out = {}
    for name, full in mcore.items():
        offsets, key = [], name
        layer = re.match(r"^decoder\.layers\.(\d+)\.(.+)$", name)
        if layer and model == "gpt":  # TransformerBlock: homogeneous layers share one key with a layer axis
            offsets, key = [(0, int(layer[1]), card.num_layers)], f"decoder.layers.{layer[2]}"
        expert = re.match(r"^(.*\.experts\.linear_fc[12]\.weight)(\d+)$", key)
        if expert:  # TEGroupedMLP: one key per linear with a global expert axis
            offsets, key = [*offsets, (len(offsets), int(expert[2]), card.num_experts)], expert[1]
        local = _expected_local(card, name, full, tp)
        out[name] = _sharded(card, name, torch.empty_like(local), key, offsets, tp)
    return out


def _sharded_axis(name: str) -> int | None:
    """Tensor-parallel axis of a state-dict tensor, None if replicated across TP."""
    if name.endswith("gate_weight") or "layer_norm" in name or "layernorm" in name or name.endswith("norm.weight"):
        return None
    if name.endswith(("A_log", "dt_bias")):
        return 0
    leaf = ".".join(re.sub(r"weight\d+$", "weight", name).rsplit(".", 2)[-2:])
    return TP_AXIS.get(leaf)


def _expected_local(card, name: str, full: torch.Tensor, tp: tuple[int, int]) -> torch.Tensor:
    """The TP rank's block of a TP=1 tensor (SwiGLU and GDN sections split one by one)."""
    rank, size = tp
    axis = _sharded_axis(name)
    if axis is None or size == 1:
        return full
    if re.search(r"linear_fc1\.weight\d*$", name):
        gate, up = full.chunk(2)
        return torch.cat([gate.chunk(size)[rank], up.chunk(size)[rank]])
    if name.endswith(("self_attention.in_proj.weight", "self_attention.conv1d.weight")):
        sections, _ = _gdn_sections(card, 1)
        sections = sections if name.endswith("in_proj.weight") else sections[:3]
        return torch.cat([s.chunk(size)[rank] for s in full.split(sections)])
    return full.chunk(size, dim=axis)[rank]


def _load_and_compare(rank: int, world: int, port: int, checkpoints: dict[str, str], seed: int) -> None:
    """In one process of ``world``: load every checkpoint at TP=``world`` (rank ``rank``) and compare."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from megatron.core import dist_checkpointing

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for name, checkpoint in checkpoints.items():
            card = get_card(name)
            mcore = hf_to_mcore(card, random_hf_tensors(card, seed=seed))
            sharded = megatron_sharded_state_dict(card, mcore, family_module(card).MCORE_MODEL, tp=(rank, world))
            loaded = dist_checkpointing.load(sharded, checkpoint, validate_access_integrity=world > 1)
            for tensor_name, full in mcore.items():
                expected = _expected_local(card, tensor_name, full, (rank, world))
                assert torch.equal(loaded[tensor_name], expected), f"{name}: {tensor_name}"
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    out = {}
    for name in ("qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"):
        card, tmp = get_card(name), tmp_path_factory.mktemp(name)
        write_hf(card, random_hf_tensors(card, seed=11), tmp / "hf")
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
        out[name] = str(tmp / "mcore" / RELEASE)
    return out


def test_megatron_loads_the_whole_model_at_tp1(checkpoints: dict[str, str]) -> None:
    _load_and_compare(0, 1, free_port(), checkpoints, seed=11)


def test_megatron_loads_tp2_shards(checkpoints: dict[str, str]) -> None:
    mp.start_processes(_load_and_compare, args=(2, free_port(), checkpoints, 11), nprocs=2, join=True,
                       start_method="spawn")
