"""Mutation audit of the parallel-layout checks (session 39): each test pins a refusal (or an acceptance) whose loss
would let a layout through that megatron-core only refuses on the GPU after the queue, or refuse a good one."""

import dataclasses
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError, validate_layout

QWEN35 = get_card("qwen3.5-35b-a3b")
QWEN3 = get_card("qwen3-30b-a3b")


def test_a_shared_expert_width_tp_does_not_divide_is_refused() -> None:
    """megatron-core splits the shared expert's FFN width over TP (column-parallel ``linear_fc1``) and asserts an even
    split when it builds the model, on the GPU: a fresh width that is even but not a multiple of 4 is refused at
    TP 4 naming the field and both numbers, and accepted at TP 2 (every other size of the card fits both)."""
    width = 4 * random.randint(16, 1024) + 2
    card = dataclasses.replace(QWEN35, name="x", moe_shared_expert_intermediate_size=width)
    with pytest.raises(ParallelLayoutError,
                       match=rf"moe_shared_expert_intermediate_size \({width}\) is not divisible by tp \(4\)"):
        validate_layout(card, ParallelLayout(tp=4, sp=True))
    validate_layout(card, ParallelLayout(tp=2, sp=True))


def test_a_world_size_that_context_parallelism_does_not_fit_is_refused() -> None:
    """The dense GPUs split into TP x PP x CP x DP: with pp 2 and cp 2 a fresh world size divisible by pp (and by the
    experts' etp x ep x pp) but not by 4 leaves a data-parallel group short, which megatron-core only finds when it
    builds its process groups; refused naming the product, while a multiple of 4 is accepted."""
    layout = ParallelLayout(pp=2, cp=2)
    world_size = 4 * random.randint(1, 256) + 2
    with pytest.raises(ParallelLayoutError, match=rf"world size {world_size} is not divisible by tp x pp x cp = 4;"):
        validate_layout(QWEN35, layout, world_size=world_size)
    validate_layout(QWEN35, layout, world_size=world_size + 2)
