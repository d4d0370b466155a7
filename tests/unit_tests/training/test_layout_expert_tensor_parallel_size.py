"""``--expert-tensor-parallel-size`` reaches the layout the model is built and checked with: the entry's layout check
refuses an ETP that does not split each expert's width, or whose ETP x EP x PP does not divide the world size (which
megatron's ``validate_args`` leaves to megatron-core's parallel state, failing on every rank), though TP, PP, EP and
CP fit."""

from __future__ import annotations

import argparse
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import megatron_parser
from megatron.oellm.training.args import add_oellm_arguments, merge_card_flags
from megatron.oellm.training.entry import check_layout
from megatron.oellm.training.model_provider import layout_from_args

CARD = "qwen3-30b-a3b-tiny"


def _parsed(etp: int, world_size: int) -> argparse.Namespace:
    """Megatron's parse of a run of :data:`CARD` with ``--expert-tensor-parallel-size etp`` on ``world_size`` GPUs
    (no validation), with the fields megatron's validation and tokenizer set."""
    argv = merge_card_flags(["--oellm-model", CARD, "--seq-length", "128", "--expert-tensor-parallel-size",
                             str(etp)]).argv
    args = megatron_parser(add_oellm_arguments).parse_args(argv)
    args.padded_vocab_size, args.virtual_pipeline_model_parallel_size = 640, None
    args.world_size = world_size
    return args


def _divisors(amount: int) -> list[int]:
    """The divisors of ``amount`` above 1."""
    return [d for d in range(2, amount + 1) if amount % d == 0]


def test_the_layout_carries_the_runs_expert_tensor_parallel_size():
    """Whatever size the command line gives, the layout holds it (not megatron's default of 1)."""
    etp = random.randrange(2, 65)
    assert layout_from_args(_parsed(etp, etp)).etp == etp


def test_an_etp_that_does_not_split_the_expert_width_is_refused():
    """An ETP that does not divide the card's ``moe_ffn_hidden_size`` is refused, naming both; one that does passes."""
    width = get_card(CARD).moe_ffn_hidden_size
    bad = random.choice([n for n in range(2, 2 * width) if width % n])
    with pytest.raises(ValueError, match=rf"moe_ffn_hidden_size \({width}\) is not divisible by etp \({bad}\)"):
        check_layout(_parsed(bad, bad))
    good = random.choice(_divisors(width))
    check_layout(_parsed(good, good * random.randrange(1, 9)))


def test_a_world_size_etp_does_not_divide_is_refused():
    """A world size TP x PP x CP (1) divides but ETP x EP x PP (ETP alone here) does not is refused, naming the world
    size and the product; a multiple of ETP passes."""
    etp = random.choice([d for d in _divisors(get_card(CARD).moe_ffn_hidden_size) if d % 2 == 0])
    world_size = random.randrange(1, 64, 2)  # odd: no even ETP divides it
    with pytest.raises(ValueError, match=rf"world size {world_size} is not divisible by etp x ep x pp = {etp};"):
        check_layout(_parsed(etp, world_size))
    check_layout(_parsed(etp, etp * random.randrange(1, 9)))
