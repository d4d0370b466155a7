"""CPU initialisation (``use_cpu_initialization``) of the torch-native grouped experts under expert tensor parallelism
(two gloo ranks on the CPU).

Every rank draws from the same seeded CPU generator (megatron seeds the ranks of a pipeline stage alike), so a rank
that initialised only its own shard would hold the same numbers as the other expert-TP rank: duplicated neurons that
get the same gradients and never part. Like megatron-core's CPU initialisation, each rank must hold its part of one
whole matrix, the same matrix an unsharded build draws (a gated fc1's part: its share of each half, the layout
the checkpoint's global tensor has).
"""

import math
import os

import pytest
import torch
from backend_setup import build_experts, moe_config
from megatron.core.process_groups_config import ProcessGroupCollection

from megatron.oellm.runtime import free_port
from tests.unit_tests.cpu_megatron import gloo_world

NUM_EXPERTS, HIDDEN, FFN, SEED = 4, 16, 24, 1234


def _experts(pg_collection: ProcessGroupCollection | None, gated: bool) -> torch.nn.Module:
    """Experts initialised on the CPU from the generator seeded with :data:`SEED` (``pg_collection`` None: one rank)."""
    config = moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, gated_linear_unit=gated, use_cpu_initialization=True)
    torch.manual_seed(SEED)
    return build_experts(config, pg_collection=pg_collection)


def _rank_part(weight: torch.Tensor, axis: int, rank: int, world: int, gated_fc1: bool) -> torch.Tensor:
    """Expert-TP rank ``rank``'s part of the unsharded stacked ``weight``: its chunk along ``axis``, or for a gated
    fc1 its chunk of each half (megatron's SwiGLU checkpoint layout)."""
    if gated_fc1:
        return torch.cat([half.chunk(world, dim=axis)[rank] for half in weight.chunk(2, dim=axis)], dim=axis)
    return weight.chunk(world, dim=axis)[rank]


def _check_rank(rank: int, world: int, port: int, failures) -> None:
    """One expert-TP rank: its shards are its parts of what an unsharded build initialises."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with gloo_world(rank, world, port, expert_tensor_parallel_size=world):
        try:
            for gated in (True, False):
                sharded = _experts(ProcessGroupCollection.use_mpu_process_groups(), gated)
                whole = _experts(None, gated)
                for name, axis in (("linear_fc1", 1), ("linear_fc2", 2)):
                    expected = _rank_part(getattr(whole, name).weight, axis, rank, world, gated and axis == 1)
                    got = getattr(sharded, name).weight
                    assert got.shape == expected.shape, (name, got.shape, expected.shape)
                    assert torch.equal(got, expected), f"{name} (gated={gated}) is not this rank's part"
        except AssertionError as error:
            failures.put(f"rank {rank}: {error}")
            raise


def test_expert_tp_ranks_initialise_their_parts_of_one_matrix() -> None:
    import torch.multiprocessing as mp

    failures = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_check_rank, args=(2, free_port(), failures), nprocs=2, join=True, start_method="spawn")
    assert failures.empty()


@pytest.mark.parametrize("gated", [True, False])
def test_cpu_initialization_follows_the_init_method(gated: bool) -> None:
    """One rank: every expert's matrix is its init method's draw (normal, std 0.02 for fc1 and 0.02 / sqrt(2 x
    layers) for fc2, megatron's output-layer scaling), each expert a different one."""
    experts = _experts(None, gated)
    for name, std in (("linear_fc1", 0.02), ("linear_fc2", 0.02 / math.sqrt(2))):
        weight = getattr(experts, name).weight
        assert abs(weight.std().item() / std - 1) < 0.1
        assert not torch.equal(weight[0], weight[1])
