"""A distributed checkpoint loads into the torch-native models' own tensors (CPU, gloo, world of one).

FSDP2 ``torch_dist`` resumes never call ``load_state_dict``: megatron-core 0.19.2 relies on ``dist_checkpointing.load``
writing into the tensors the sharded state dict carries. With GPTModel's prepended layer axis, megatron's loader made
each non-contiguous half of a gated fc1 contiguous (a copy), and the resumed tiny Qwen3 card trained on with its
initial fc1 weights (an H200, session 40). Each test saves random weights with megatron-core's own writer, puts fresh
random values in the same tensors and loads: the tensors must hold the saved values again, without ``load_state_dict``.
"""

from pathlib import Path

import pytest
import torch
from backend_setup import random_cpu_experts
from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.dist_checkpointing.optimizer import make_sharded_optimizer_tensor

from megatron.oellm.cards import get_card
from tests.unit_tests.cpu_megatron import cpu_checkpoint_saving, cpu_model_building, cpu_torch_model

NUM_EXPERTS, HIDDEN, FFN = 4, 16, 24
PREFIX = "decoder.layers.mlp.experts."
LAYER_AXIS = ((0, 0, 1),)
"""GPTModel's blocks prepend the layer axis (here one layer, so the checkpoint is complete); the hybrid stack names
each layer instead."""


@pytest.fixture
def cpu_checkpoints() -> None:
    """megatron-core's checkpoint writer and reader on the CPU (their CUDA calls stood in for, see cpu_megatron)."""
    with cpu_model_building(), cpu_checkpoint_saving():
        yield


def random_experts(gated: bool):
    """The torch-native grouped experts, fp32 on CPU, random weights."""
    return random_cpu_experts(NUM_EXPERTS, HIDDEN, FFN, gated=gated)


def refill(tensors: list[torch.Tensor]) -> None:
    """Fresh random values in ``tensors``, in place (what a resumed run holds before its load)."""
    with torch.no_grad():
        for tensor in tensors:
            tensor.normal_()


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "plain"])
@pytest.mark.parametrize("layer_offsets", [(), LAYER_AXIS], ids=["no-layer-axis", "layer-axis"])
def test_a_load_writes_the_saved_weights_into_the_parameters(world_of_one, cpu_checkpoints, tmp_path: Path, gated,
                                                             layer_offsets):
    experts = random_experts(gated)
    weights = [experts.linear_fc1.weight, experts.linear_fc2.weight]
    saved = [weight.detach().clone() for weight in weights]
    dist_checkpointing.save(experts.sharded_state_dict(PREFIX, layer_offsets), str(tmp_path))
    refill(weights)
    assert not torch.equal(weights[0], saved[0])
    loaded = dist_checkpointing.load(experts.sharded_state_dict(PREFIX, layer_offsets), str(tmp_path))
    for n, (weight, expected) in enumerate(zip(weights, saved, strict=True), start=1):
        torch.testing.assert_close(weight.detach(), expected, rtol=0, atol=0, msg=f"fc{n} not restored in place")
        torch.testing.assert_close(loaded[f"{PREFIX}linear_fc{n}.weight"], expected, rtol=0, atol=0)


def test_optimizer_state_of_a_gated_fc1_loads_into_the_state_not_the_weight(world_of_one, cpu_checkpoints,
                                                                             tmp_path: Path):
    """megatron-core builds each optimizer state's checkpoint entry from the weight's factory with the state as its
    data: a load must fill that state and leave the weight alone."""
    experts = random_experts(gated=True)
    weight = experts.linear_fc1.weight
    key = f"{PREFIX}linear_fc1.weight"

    def moment_entries(moment: torch.Tensor) -> dict:
        return {key: make_sharded_optimizer_tensor(experts.sharded_state_dict(PREFIX, LAYER_AXIS)[key], moment,
                                                   "optimizer.state.exp_avg")}

    moment = torch.randn_like(weight)
    saved_moment = moment.clone()
    dist_checkpointing.save(moment_entries(moment), str(tmp_path))
    refill([moment])
    weight_before = weight.detach().clone()
    dist_checkpointing.load(moment_entries(moment), str(tmp_path))
    torch.testing.assert_close(moment, saved_moment, rtol=0, atol=0)
    torch.testing.assert_close(weight.detach(), weight_before, rtol=0, atol=0)


def previous_layout(experts, layer_offsets: tuple, halves: list[torch.Tensor]) -> dict:
    """The experts' checkpoint entries as releases before session 40 wrote them: a gated fc1 as its two halves along
    the feature axis, each one shard of all local experts (world of one), carrying ``halves``."""
    sharded = experts.sharded_state_dict(PREFIX, layer_offsets)
    entry, axis = f"{PREFIX}linear_fc1.weight", len(layer_offsets)
    key = sharded[entry].key  # the checkpoint's name of the tensor
    sharded[entry] = [ShardedTensor.from_rank_offsets(key, half, *layer_offsets, (axis, 0, 1), (axis + 1, part, 2),
                                                      replica_id=(0, 0, 0), prepend_axis_num=axis)
                      for part, half in enumerate(halves)]
    return sharded


@pytest.mark.parametrize("layer_offsets", [(), LAYER_AXIS], ids=["no-layer-axis", "layer-axis"])
def test_checkpoints_of_the_previous_layout_load_in_place_and_back(world_of_one, cpu_checkpoints, tmp_path: Path,
                                                                   layer_offsets):
    """A gated fc1 saved as two halves (earlier releases) loads into this release's per-expert shards in place, and
    one this release saves reads back through the two halves: both describe one global tensor."""
    experts = random_experts(gated=True)
    weight = experts.linear_fc1.weight
    saved = weight.detach().clone()
    (tmp_path / "previous").mkdir()
    (tmp_path / "this").mkdir()
    dist_checkpointing.save(previous_layout(experts, layer_offsets, list(torch.chunk(saved, 2, dim=1))),
                            str(tmp_path / "previous"))
    refill([weight])
    dist_checkpointing.load(experts.sharded_state_dict(PREFIX, layer_offsets), str(tmp_path / "previous"))
    torch.testing.assert_close(weight.detach(), saved, rtol=0, atol=0)

    dist_checkpointing.save(experts.sharded_state_dict(PREFIX, layer_offsets), str(tmp_path / "this"))
    halves = [torch.randn_like(half) for half in torch.chunk(saved, 2, dim=1)]
    loaded = dist_checkpointing.load(previous_layout(experts, layer_offsets, halves), str(tmp_path / "this"))
    torch.testing.assert_close(torch.cat(loaded[f"{PREFIX}linear_fc1.weight"], dim=1), saved, rtol=0, atol=0)


@pytest.mark.parametrize("card", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_every_parameter_of_a_whole_model_is_restored_in_place(world_of_one, cpu_checkpoints, tmp_path: Path, card):
    """The whole torch-native model as its spec builder makes it (GPTModel for Qwen3, the hybrid stack for Qwen3.5):
    what an FSDP2 resume relies on for every module, not only the experts."""
    model = cpu_torch_model(get_card(card))
    parameters = dict(model.named_parameters())
    refill(list(parameters.values()))
    saved = {name: parameter.detach().clone() for name, parameter in parameters.items()}
    dist_checkpointing.save(model.sharded_state_dict(), str(tmp_path))
    refill(list(parameters.values()))
    dist_checkpointing.load(model.sharded_state_dict(), str(tmp_path))
    not_restored = [name for name, parameter in parameters.items() if not torch.equal(parameter.detach(), saved[name])]
    assert not not_restored
