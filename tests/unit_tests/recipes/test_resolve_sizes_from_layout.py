"""Sizes a row's resolution derives from its parallel layout: the batch check's data-parallel size is world / (TP x PP
x CP), and the card the run builds pads its vocabulary to the recipe's ``--make-vocab-size-divisible-by`` times TP.
Fresh random sizes."""

from __future__ import annotations

import math
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout
from megatron.oellm.recipes.config import RecipeError, TableRow
from megatron.oellm.recipes.resolve import ResolvedRow, check_batch


def test_the_batch_check_divides_the_gpus_by_cp_too():
    """Megatron's data-parallel size is world / (TP x PP x CP): a global batch that fills it is valid even when it
    is no multiple of micro batch x world / (TP x PP)."""
    cp, dp, micro = random.choice([2, 4]), random.randint(1, 8), random.randint(1, 4)
    layout, world = ParallelLayout(cp=cp), cp * dp
    valid = micro * dp * (cp * random.randint(0, 5) + 1)  # a multiple of micro x dp, not of micro x dp x cp
    check_batch(layout, world, valid, micro)
    if dp > 1 or micro > 1:
        with pytest.raises(RecipeError, match=rf"data-parallel size \({dp} = {world} GPUs / tp x pp x cp\)"):
            check_batch(layout, world, valid + 1, micro)


def test_the_built_card_pads_to_the_recipes_vocab_divisor_times_tp():
    card, tp = get_card("qwen3-30b-a3b"), random.choice([1, 2, 4, 8])
    while True:  # a divisor whose padding differs from megatron's default 128
        divisor = random.randint(1, 4096)
        expected = math.ceil(card.vocab_size / (divisor * tp)) * divisor * tp
        if expected != math.ceil(card.vocab_size / (128 * tp)) * 128 * tp:
            break
    resolved = ResolvedRow(TableRow(nodes=1, global_batch_size=8, micro_batch_size=1), card, ParallelLayout(tp=tp),
                           8, {"make-vocab-size-divisible-by": divisor})
    assert resolved.built_card.vocab_size == expected
