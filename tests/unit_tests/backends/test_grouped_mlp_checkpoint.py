"""The torch-native grouped experts in megatron's distributed checkpoints (CPU, gloo, world of one).

The stacked expert weight must (a) be the very tensor its ShardedTensor carries, because megatron-core's optimizers
map their state to model tensors by identity (a per-expert view made the plain optimizer's save fail with
``KeyError`` on the H200), and (b) describe the same global checkpoint tensors as megatron-core's own
``SequentialMLP`` (whose layout TE's grouped experts share), so a checkpoint written by one loads into the other.
megatron's checkpoint writer needs CUDA, so the written tensors are assembled from the shards here; the loader runs on
CPU and is exercised with a converted checkpoint in ``tests/unit_tests/convert``.
"""

import os

import pytest
import torch
from backend_setup import random_cpu_experts
from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory, is_main_replica
from megatron.core.dist_checkpointing.optimizer import get_param_id_to_sharded_param_map

from megatron.oellm.runtime import free_port
from tests.unit_tests.cpu_megatron import gloo_world

NUM_EXPERTS, HIDDEN, FFN = 4, 16, 24
PREFIX = "decoder.layers.0.mlp.experts."



def build_experts(grouped: bool, gated: bool):
    """Experts as the torch-native provider builds them, fp32 on CPU, random weights."""
    return random_cpu_experts(NUM_EXPERTS, HIDDEN, FFN, grouped=grouped, gated=gated)


def sequential_weights(experts, projection: str) -> torch.Tensor:
    """``SequentialMLP``'s per-expert weights of ``projection`` stacked like ours."""
    return torch.stack([getattr(expert, projection).weight for expert in experts.local_experts])


@pytest.mark.parametrize("gated", [True, False])
def test_every_expert_parameter_is_found_by_the_optimizer_map(world_of_one, gated):
    experts = build_experts(grouped=True, gated=gated)
    parameters = list(experts.parameters())
    found = get_param_id_to_sharded_param_map(experts.sharded_state_dict(prefix=PREFIX), parameters)
    assert sorted(found) == list(range(len(parameters)))
    assert all(found[i].data is parameter for i, parameter in enumerate(parameters))


def checkpoint_tensors(sharded: dict, main_replicas_only: bool = False) -> dict[str, torch.Tensor]:
    """What a distributed checkpoint of ``sharded`` holds: each key's dense global tensor assembled from its shards
    (factories built first, prepended axes of size 1 in each shard), extra-state objects left out; with
    ``main_replicas_only`` only the shards this rank writes (megatron-core's main replicas: the others are copies a
    rank with replica id 0 writes)."""
    dense: dict[str, torch.Tensor] = {}
    for entry in sharded.values():
        shards = entry.build() if isinstance(entry, ShardedTensorFactory) else [entry]
        for shard in shards if isinstance(shards, list) else [shards]:
            if not isinstance(shard, ShardedTensor) or (main_replicas_only and not is_main_replica(shard.replica_id)):
                continue
            target = dense.setdefault(shard.key, torch.full(shard.global_shape, float("nan")))
            sizes = (1,) * shard.prepend_axis_num + tuple(shard.local_shape)
            window = tuple(slice(start, start + size) for start, size in zip(shard.global_offset, sizes, strict=True))
            region = target[window]
            assert region.isnan().all(), f"{shard.key}: shards overlap at {shard.global_offset}"
            region.copy_(shard.data.reshape(region.shape))
    return dense


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("layer_offsets", [(), ((0, 1, 3),)], ids=["no-layer-axis", "layer-axis"])
def test_checkpoint_holds_what_sequential_experts_write(world_of_one, gated, layer_offsets):
    ours, reference = build_experts(grouped=True, gated=gated), build_experts(grouped=False, gated=gated)
    with torch.no_grad():
        for projection in ("linear_fc1", "linear_fc2"):
            for i, expert in enumerate(reference.local_experts):
                getattr(expert, projection).weight.copy_(getattr(ours, projection).weight[i])
    written = checkpoint_tensors(ours.sharded_state_dict(PREFIX, layer_offsets))
    expected = checkpoint_tensors(reference.sharded_state_dict(PREFIX, layer_offsets))
    assert written.keys() == expected.keys() == {f"{PREFIX}experts.linear_fc{n}.weight" for n in (1, 2)}
    for key, tensor in expected.items():
        covered = ~tensor.isnan()  # with a layer axis, this module writes its own layer only
        projection = key.rsplit(".", 2)[-2]
        assert covered.sum() == getattr(ours, projection).weight.numel(), key
        assert torch.equal(~written[key].isnan(), covered), key
        torch.testing.assert_close(written[key][covered], tensor[covered], rtol=0, atol=0)


def test_loaded_checkpoint_entries_fill_the_stacked_weights(world_of_one):
    """``dist_checkpointing.load`` returns one merged tensor per projection plus TE's per-expert extra states."""
    ours = build_experts(grouped=True, gated=True)
    stacked = {f"linear_fc{n}.weight": torch.randn_like(getattr(ours, f"linear_fc{n}").weight) for n in (1, 2)}
    extra = {f"linear_fc{n}._extra_state{'' if i == 0 else i}": None for n in (1, 2) for i in range(NUM_EXPERTS)}
    ours.load_state_dict({**stacked, **extra})
    for name, tensor in stacked.items():
        torch.testing.assert_close(ours.state_dict()[name.replace("weight", "weight0")], tensor[0], rtol=0, atol=0)
        torch.testing.assert_close(dict(ours.named_parameters())[name], tensor, rtol=0, atol=0)


def test_singleton_local_shards_are_refused(world_of_one):
    experts = build_experts(grouped=True, gated=True)
    with pytest.raises(ValueError, match="singleton"):
        experts.sharded_state_dict(prefix=PREFIX, metadata={"singleton_local_shards": True})


def _compare_on_rank(rank: int, world: int, port: int, ep: int, etp: int, failures) -> None:
    """One rank of ``world``: ours and SequentialMLP (same weights) hold the same part of every global tensor, and
    write (as main replica) the same part of it: a shard marked a copy on every rank holding it is never saved."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with gloo_world(rank, world, port, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp):
        try:
            torch.manual_seed(rank)
            ours, reference = build_experts(grouped=True, gated=True), build_experts(grouped=False, gated=True)
            with torch.no_grad():
                for projection in ("linear_fc1", "linear_fc2"):
                    for i, expert in enumerate(reference.local_experts):
                        getattr(expert, projection).weight.copy_(getattr(ours, projection).weight[i])
            written = checkpoint_tensors(ours.sharded_state_dict(PREFIX))
            expected = checkpoint_tensors(reference.sharded_state_dict(PREFIX))
            saved = checkpoint_tensors(ours.sharded_state_dict(PREFIX), main_replicas_only=True)
            expected_saved = checkpoint_tensors(reference.sharded_state_dict(PREFIX), main_replicas_only=True)
            assert set(saved) == set(expected_saved) == set(expected)
            for key, tensor in expected_saved.items():
                assert torch.equal(saved[key].isnan(), tensor.isnan()), f"{key}: main replicas differ"
            for key, tensor in expected.items():
                covered = ~tensor.isnan()
                assert covered.sum() * world == tensor.numel(), key  # each rank writes its 1/world of the tensor
                assert torch.equal(~written[key].isnan(), covered), key
                torch.testing.assert_close(written[key][covered], tensor[covered], rtol=0, atol=0)
        except AssertionError as error:
            failures.put(f"rank {rank}: {error}")
            raise


@pytest.mark.parametrize("ep,etp", [(2, 1), (1, 2)], ids=["EP2", "ETP2"])
def test_sharded_layout_matches_sequential_experts_on_two_ranks(ep, etp):
    import torch.multiprocessing as mp

    failures = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_compare_on_rank, args=(2, free_port(), ep, etp, failures), nprocs=2, join=True,
                       start_method="spawn")
    assert failures.empty()
