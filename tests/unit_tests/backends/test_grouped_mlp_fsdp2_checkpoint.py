"""The torch-native stacked experts under torch FSDP2 in megatron's distributed checkpoints (CPU, gloo, world of one).

FSDP2 turns each parameter into a DTensor sharded along its first axis (here: the experts). megatron-core's
optimizers find a parameter's checkpoint tensor by the identity of its local shard, which megatron's own checkpoint
helpers store for FSDP2 parameters; the stacked weights stored the DTensor, and the first save under
``--use-torch-fsdp2`` stopped with ``KeyError: 4`` on the H200 (docs/benchmarks.md, session 39)."""

import pytest
import torch
from backend_setup import GroupStandIn, as_fsdp2_parameters, build_experts, moe_config
from megatron.core.dist_checkpointing.mapping import ShardedTensorFactory
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.utils import make_sharded_tensor_for_checkpoint
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

NUM_EXPERTS, HIDDEN, FFN = 4, 16, 24
PREFIX = "decoder.layers.0.mlp."



def fsdp2_experts(gated: bool) -> torch.nn.Module:
    """Provider-built experts whose stacked weights are FSDP2-style parameters: DTensors sharded on the expert axis
    over a one-rank CPU mesh, marked as megatron-core marks FSDP2's parameters, with fresh random values."""
    config = moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, gated_linear_unit=gated, use_cpu_initialization=True)
    return as_fsdp2_parameters(build_experts(config, pg_collection=ProcessGroupCollection.use_mpu_process_groups()))


@pytest.mark.parametrize("gated", [True, False])
def test_fsdp2_expert_weights_are_stored_as_megatron_stores_fsdp2_parameters(world_of_one, gated):
    """Each FSDP2 weight's checkpoint entry carries the parameter's local shard, the tensor megatron-core's own helper
    stores for an FSDP2 parameter and its optimizers look up (on torch 2.11, ``to_local`` under ``no_grad`` returns
    that very tensor; the H200 save and resume in docs/benchmarks.md, session 39, ran through it)."""
    experts = fsdp2_experts(gated)
    sharded = experts.sharded_state_dict(prefix=PREFIX)
    for n in (1, 2):
        parameter = getattr(experts, f"linear_fc{n}").weight
        entry = sharded[f"{PREFIX}linear_fc{n}.weight"]
        assert entry.data is parameter._local_tensor
        assert make_sharded_tensor_for_checkpoint(parameter, "reference").data is parameter._local_tensor


def test_fsdp2_checkpoint_describes_the_global_expert_tensor(world_of_one):
    """On one rank the local shard is every expert: global shape and offsets equal those of the unsharded weight,
    and the one rank holds the main replica."""
    experts = fsdp2_experts(gated=False)
    entry = experts.linear_fc2.sharded_state_dict(prefix="linear_fc2.")["linear_fc2.weight"]
    assert entry.global_shape == (NUM_EXPERTS, HIDDEN, FFN)
    assert entry.global_offset == (0, 0, 0)
    assert entry.replica_id == (0, 0, 0)
    torch.testing.assert_close(entry.data, experts.linear_fc2.weight.full_tensor(), rtol=0, atol=0)


def test_uneven_fsdp2_expert_blocks_are_refused(world_of_one, monkeypatch):
    """Experts that FSDP2 would split unevenly (4 over 3 ranks) cannot be described by equal checkpoint blocks."""
    experts = fsdp2_experts(gated=False)
    monkeypatch.setattr("megatron.oellm.backends.torch_native.grouped_mlp.fsdp2_mesh", lambda weight: (1, 3))
    with pytest.raises(ValueError, match="FSDP2 splits 4 local experts unevenly over 3 data-parallel ranks"):
        experts.linear_fc2.sharded_state_dict(prefix="linear_fc2.")


def test_plain_parameters_keep_their_checkpoint_entry(world_of_one):
    """Without FSDP2 the parameter itself is the checkpoint tensor (the existing contract)."""
    config = moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, use_cpu_initialization=True)
    experts = build_experts(config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    entry = experts.linear_fc2.sharded_state_dict(prefix="linear_fc2.")["linear_fc2.weight"]
    assert entry.data is experts.linear_fc2.weight



@pytest.mark.parametrize("gated", [True, False])
def test_the_second_fsdp2_rank_writes_its_own_expert_block(world_of_one, monkeypatch, gated):
    """With FSDP2 over two data-parallel ranks, rank 1 holds experts ``E .. 2E-1`` of its ``2E``-expert shard view
    and is a main replica (written, not a copy of rank 0's block), for fc2 and for both halves of a gated fc1."""
    experts = fsdp2_experts(gated)
    monkeypatch.setattr("megatron.oellm.backends.torch_native.grouped_mlp.fsdp2_mesh", lambda weight: (1, 2))
    for projection in (experts.linear_fc1, experts.linear_fc2):
        projection.expt_dp_group = GroupStandIn(1, 2)
    sharded = experts.sharded_state_dict(prefix=PREFIX)
    fc2, fc1 = sharded[f"{PREFIX}linear_fc2.weight"], sharded[f"{PREFIX}linear_fc1.weight"]
    fc1_entries = fc1.build() if isinstance(fc1, ShardedTensorFactory) else [fc1]
    for entry in (fc2, *fc1_entries):
        assert entry.replica_id == (0, 0, 0)
        assert entry.global_shape[0] == 2 * NUM_EXPERTS
    assert (fc2.global_offset[0], fc2.axis_fragmentations[0]) == (NUM_EXPERTS, 2)
    # a gated fc1 is written per expert (gate and up half each), experts E .. 2E-1; otherwise as one block
    fc1_experts = sorted(entry.global_offset[0] for entry in fc1_entries)
    assert fc1_experts == (sorted(2 * list(range(NUM_EXPERTS, 2 * NUM_EXPERTS))) if gated else [NUM_EXPERTS])


def test_a_placement_other_than_the_expert_axis_is_refused(world_of_one):
    """A weight FSDP2 would shard on another axis (or a mesh of more dimensions) has no expert-block checkpoint."""
    experts = fsdp2_experts(gated=False)
    mesh = init_device_mesh("cpu", (1,))
    weight = torch.nn.Parameter(distribute_tensor(torch.randn(NUM_EXPERTS, HIDDEN, FFN), mesh, [Shard(1)]))
    weight.is_torch_fsdp2_param = True
    experts.linear_fc2.weight = weight
    with pytest.raises(ValueError, match=r"FSDP2 holds the stacked experts as \(Shard\(dim=1\),\)"):
        experts.linear_fc2.sharded_state_dict(prefix="linear_fc2.")
