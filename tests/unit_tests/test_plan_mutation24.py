"""Plan figures that no other test pinned down (found by mutation testing): the expert data-parallel group spans
the pipeline too, and a plan refuses an empty world with its own one-line error."""

import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError
from megatron.oellm.plan import BYTES_PER_PARAM_GRAD, BYTES_PER_PARAM_OPTIMIZER, BYTES_PER_PARAM_WEIGHT, build_plan


def test_expert_data_parallel_group_is_world_over_etp_ep_and_pp():
    """megatron-core's expert data-parallel group is world / (ETP x EP x PP): with PP > 1 each routed-expert shard
    has that many replicas to split its optimizer state over, not world / (ETP x EP). Fresh random layouts of
    Qwen3-30B-A3B (48 layers, 128 experts of width 768), TP 1."""
    card = get_card("qwen3-30b-a3b")
    pp, ep, etp, replicas = random.choice([2, 4, 8]), random.choice([1, 2, 4, 8]), random.choice([1, 2]), \
        random.randint(1, 4)
    world = pp * ep * etp * replicas
    plan = build_plan(card, ParallelLayout(pp=pp, ep=ep, etp=etp), world)
    assert plan.expert_data_parallel == replicas, (pp, ep, etp, replicas)
    assert plan.data_parallel == world // pp
    per_param = BYTES_PER_PARAM_WEIGHT + BYTES_PER_PARAM_GRAD
    for rank in plan.ranks:
        assert rank.static_bytes == ((rank.dense_params + rank.expert_params) * per_param
                                     + rank.dense_params * BYTES_PER_PARAM_OPTIMIZER // (world // pp)
                                     + rank.expert_params * BYTES_PER_PARAM_OPTIMIZER // replicas)


@pytest.mark.parametrize("world", [0, -random.randint(1, 64)])
def test_a_plan_for_no_gpu_is_refused_in_one_line(world):
    """``build_plan`` on zero (or fewer) GPUs: its own error naming the fix, not a ZeroDivisionError."""
    with pytest.raises(ParallelLayoutError, match=rf"world size {world}: a plan needs at least one GPU") as refused:
        build_plan(get_card("qwen3-30b-a3b-tiny"), ParallelLayout(), world)
    assert "\n" not in str(refused.value)
