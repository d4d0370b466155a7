"""The torch-native grouped experts' checkpoints across layouts, from a mutation audit (CPU, gloo world of one).

Other ranks of a layout are simulated in this process with stand-in process groups (megatron asks a group for
``rank()`` and ``size()`` only): a gated fc1 checkpoint loaded through megatron-core's factory merge into each
expert-TP rank must compute what a float64 per-expert loop computes on the global weights; an expert data-parallel
rank other than 0 must mark its expert shards as copies, as megatron-core's ``SequentialMLP`` does; and FSDP2 blocks
on an expert-parallel rank other than 0 must sit at that rank's global experts.
"""

import random

import pytest
import torch
from backend_references import grouped_mlp_reference, relative_error
from backend_setup import GroupStandIn, as_fsdp2_parameters, build_experts, moe_config
from megatron.core.dist_checkpointing.mapping import (
    ShardedObject,
    ShardedTensor,
    ShardedTensorFactory,
    apply_factories,
    apply_factory_merges,
    is_main_replica,
)
from megatron.core.process_groups_config import ProcessGroupCollection

HIDDEN, FFN = 16, 24
PREFIX = "decoder.layers.0.mlp."



def _groups(**stand_ins: GroupStandIn) -> ProcessGroupCollection:
    """megatron's process groups of the world of one, with ``stand_ins`` (``ep``, ``expt_tp``, ``expt_dp``) replacing
    some of them."""
    groups = ProcessGroupCollection.use_mpu_process_groups()
    for name, group in stand_ins.items():
        setattr(groups, name, group)
    return groups


def _load(experts: torch.nn.Module, checkpoint: dict[str, torch.Tensor], layer_offsets: tuple) -> None:
    """Load ``checkpoint`` (global tensors by checkpoint key) into ``experts`` as megatron's distributed loader does:
    factories built into their shards, each shard read from its window of the global tensor, factories merged, then
    ``load_state_dict`` (extra-state objects load as None)."""
    sharded = experts.sharded_state_dict(PREFIX, layer_offsets)
    factories = {name: entry for name, entry in sharded.items() if isinstance(entry, ShardedTensorFactory)}
    apply_factories(sharded)

    def read(entry):
        if isinstance(entry, list):
            return [read(shard) for shard in entry]
        if isinstance(entry, ShardedObject):
            return None
        assert isinstance(entry, ShardedTensor), type(entry)
        sizes = (1,) * entry.prepend_axis_num + tuple(entry.local_shape)
        window = tuple(slice(start, start + size) for start, size in zip(entry.global_offset, sizes, strict=True))
        return checkpoint[entry.key][window].reshape(entry.local_shape).clone()

    loaded = apply_factory_merges({name: read(entry) for name, entry in sharded.items()}, factories)
    experts.load_state_dict({name.removeprefix(PREFIX): value for name, value in loaded.items()})


@pytest.mark.parametrize("layer_offsets", [(), ((0, 1, 3),)], ids=["no-layer-axis", "layer-axis"])
def test_a_gated_checkpoint_loads_into_every_expert_tp_layout_and_computes_the_global_experts(
        world_of_one, layer_offsets) -> None:
    """A distributed checkpoint of gated experts (random global fc1 ``[E, 2 x ffn, hidden]`` in megatron's SwiGLU
    layout, fc2 ``[E, hidden, ffn]``) loaded into expert-TP size 1 and into both ranks of expert-TP size 2: each
    layout's output (summed over the TP ranks, whose row-parallel fc2 gives partial sums) equals a float64 loop over
    the experts on the global weights, on fresh random tokens, counts and probabilities. A swapped merge of the
    gate/linear halves, or halves placed per rank instead of all first halves then all second halves, computes
    another function."""
    experts_count = random.randint(2, 4)
    fc1, fc2 = torch.randn(experts_count, 2 * FFN, HIDDEN), torch.randn(experts_count, HIDDEN, FFN) / 4
    layer = (1,) if layer_offsets else ()
    checkpoint = {}
    for key, tensor in ((f"{PREFIX}experts.linear_fc1.weight", fc1), (f"{PREFIX}experts.linear_fc2.weight", fc2)):
        checkpoint[key] = torch.full((3, *tensor.shape) if layer else tensor.shape, float("nan"))
        checkpoint[key][layer] = tensor  # the other layers' weights are not this module's to read
    counts = [random.randint(0, 5) for _ in range(experts_count)]
    counts[random.randrange(experts_count)] += 2
    hidden, probs = torch.randn(sum(counts), HIDDEN), torch.rand(sum(counts))
    expected = grouped_mlp_reference(hidden, counts, probs, list(fc1), list(fc2), gated=True)
    for tp_size in (1, 2):
        config = moe_config(HIDDEN, 4, experts_count, FFN, use_cpu_initialization=True,
                            expert_tensor_parallel_size=tp_size)
        total = torch.zeros_like(expected)
        for tp_rank in range(tp_size):
            experts = build_experts(config, pg_collection=_groups(expt_tp=GroupStandIn(tp_rank, tp_size)))
            _load(experts, checkpoint, layer_offsets)
            assert not experts.linear_fc1.weight.isnan().any() and not experts.linear_fc2.weight.isnan().any()
            with torch.no_grad():
                total += experts(hidden, torch.tensor(counts), probs)[0].double()
        assert relative_error(total, expected) < 1e-5, (tp_size, relative_error(total, expected))


def _written_elements(sharded: dict) -> dict[str, torch.Tensor]:
    """For each checkpoint key, a mask over its global tensor of the elements ``sharded`` would write (its main
    replicas; a rank writes no shard marked a copy)."""
    written: dict[str, torch.Tensor] = {}
    for entry in sharded.values():
        shards = entry.build() if isinstance(entry, ShardedTensorFactory) else entry
        for shard in shards if isinstance(shards, list) else [shards]:
            if not isinstance(shard, ShardedTensor):
                continue
            mask = written.setdefault(shard.key, torch.zeros(shard.global_shape, dtype=torch.bool))
            if is_main_replica(shard.replica_id):
                sizes = (1,) * shard.prepend_axis_num + tuple(shard.local_shape)
                mask[tuple(slice(o, o + n) for o, n in zip(shard.global_offset, sizes, strict=True))] = True
    return written


@pytest.mark.parametrize("gated", [True, False])
def test_expert_data_parallel_ranks_write_the_expert_weights_once_as_sequential_experts_do(world_of_one, gated):
    """Plain (non-FSDP) expert weights are replicated over the expert data-parallel group: rank 0 writes them and
    rank 1 holds copies, exactly the shards megatron-core's ``SequentialMLP`` writes on each rank. Two main replicas
    of one shard make megatron's checkpoint validation refuse the save (or a rank's stale copy win)."""
    config = moe_config(HIDDEN, 4, random.randint(2, 4), FFN, gated_linear_unit=gated, use_cpu_initialization=True)
    written = {}
    for dp_rank in (0, 1):
        ours = build_experts(config, pg_collection=_groups(expt_dp=GroupStandIn(dp_rank, 2)))
        reference = build_experts(config, grouped=False, pg_collection=_groups(expt_dp=GroupStandIn(dp_rank, 2)))
        written[dp_rank] = _written_elements(ours.sharded_state_dict(PREFIX))
        expected = _written_elements(reference.sharded_state_dict(PREFIX))
        assert written[dp_rank].keys() == expected.keys() == {f"{PREFIX}experts.linear_fc{n}.weight" for n in (1, 2)}
        for key, mask in expected.items():
            assert torch.equal(written[dp_rank][key], mask), (key, dp_rank)
    assert all(mask.all() for mask in written[0].values()) and not any(mask.any() for mask in written[1].values())


def _fsdp2_experts(experts_count: int, ep_rank: int, ep_size: int) -> torch.nn.Module:
    """Experts of EP rank ``ep_rank`` of ``ep_size`` whose stacked weights are FSDP2-style parameters (DTensors on
    the expert axis of a one-rank CPU mesh, marked as megatron-core marks FSDP2's parameters)."""
    config = moe_config(HIDDEN, 4, experts_count, FFN, use_cpu_initialization=True)
    return as_fsdp2_parameters(build_experts(config, pg_collection=_groups(ep=GroupStandIn(ep_rank, ep_size))))


def covered_experts(*entries) -> set[int]:
    """The global experts the checkpoint shards ``entries`` hold (their first axis)."""
    return {entry.global_offset[0] + i for entry in entries for i in range(entry.local_shape[0])}


def test_fsdp2_expert_blocks_follow_the_expert_parallel_rank(world_of_one, monkeypatch) -> None:
    """With EP 2 and FSDP2 over 2 data-parallel ranks, each EP rank's ``2 x B`` experts are split into two blocks of
    ``B``: block d of EP rank r holds global experts ``(2r + d) x B ..`` of ``4 x B``, so every (r, d) writes a
    distinct block and the four cover the global expert axis (fc2 and both halves of a gated fc1). Ordering the
    blocks by data-parallel rank first would save EP rank 1's experts over EP rank 0's. This process's one-rank-mesh
    tensor stands for one block of B; the mesh position comes from a stand-in."""
    block = 2 * random.randint(1, 2)  # even: the one-rank mesh's tensor passes FSDP2's even-split check
    starts = []
    for ep_rank in (0, 1):
        for dp_rank in (0, 1):
            experts = _fsdp2_experts(block, ep_rank, 2)
            monkeypatch.setattr("megatron.oellm.backends.torch_native.grouped_mlp.fsdp2_mesh",
                                lambda weight, d=dp_rank: (d, 2))
            sharded = experts.sharded_state_dict(PREFIX)
            fc1 = sharded[f"{PREFIX}linear_fc1.weight"]
            entries = [sharded[f"{PREFIX}linear_fc2.weight"], *fc1.build()]
            start = (2 * ep_rank + dp_rank) * block
            for entry in entries:
                assert entry.global_shape[0] == 4 * block
                assert covered_experts(entry) <= set(range(start, start + block)), (ep_rank, dp_rank)
            assert covered_experts(*entries[1:]) == set(range(start, start + block))  # fc1, per expert and half
            starts.append(entries[0].global_offset[0])
    assert sorted(starts) == [d * block for d in range(4)]


def test_fsdp2_blocks_are_placed_by_the_ranks_position_in_its_mesh(world_of_one, monkeypatch) -> None:
    """Each FSDP2 rank's checkpoint block comes from its own position in the data-parallel mesh that shards the
    weight: the second rank of a two-rank mesh holds the second block of its EP rank's experts and writes it (every
    rank reading position 0 would save all blocks over the first). The one-rank mesh of this process is told it is
    rank 1 of 2."""
    block = 2 * random.randint(1, 2)  # even: the one-rank mesh's tensor passes FSDP2's even-split check
    experts = _fsdp2_experts(block, 0, 1)
    for projection in (experts.linear_fc1, experts.linear_fc2):
        mesh = projection.weight.device_mesh
        monkeypatch.setattr(mesh, "get_local_rank", lambda *args, **kwargs: 1)
        monkeypatch.setattr(mesh, "size", lambda *args, **kwargs: 2)
    sharded = experts.sharded_state_dict(PREFIX)
    fc2, fc1_entries = sharded[f"{PREFIX}linear_fc2.weight"], sharded[f"{PREFIX}linear_fc1.weight"].build()
    assert covered_experts(fc2) == covered_experts(*fc1_entries) == set(range(block, 2 * block))
    for entry in [fc2, *fc1_entries]:
        assert entry.global_shape[0] == 2 * block
        assert is_main_replica(entry.replica_id)
