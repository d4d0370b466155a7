"""Cards rebuilt from Megatron's flags equal the cards the flags were written from (every published card)."""

import dataclasses

import pytest

from megatron.oellm.cards import PUBLISHED_CARDS, get_card
from megatron.oellm.megatron_args import flags_to_argv, model_flags, parse_megatron_argv
from megatron.oellm.training.card_from_args import card_from_megatron_args, mixer_period

NAMES = [n for n in PUBLISHED_CARDS if get_card(n).family != "ckda_hybrid"]  # 'K' is no Megatron pattern symbol


@pytest.mark.parametrize("name", NAMES + [f"{n}-tiny" for n in NAMES] + ["qwen3.5-35b-a3b-proxy-8L"])
def test_round_trip_through_megatron_flags(name):
    card = get_card(name)
    args = parse_megatron_argv(flags_to_argv(model_flags(card)) + ["--seq-length", str(card.seq_length)])
    rebuilt = card_from_megatron_args(args, name=card.name)
    assert rebuilt == dataclasses.replace(card, hf_architecture="")


def test_mixer_period_and_bad_patterns():
    assert mixer_period("GEGEGE*E|GEGEGE*E") == ("gdn", 4)
    with pytest.raises(ValueError, match="not periodic"):
        mixer_period("GE*EGEGE")
    with pytest.raises(ValueError, match="one mixer followed by E"):
        mixer_period("GGE*")
    with pytest.raises(ValueError, match="no card family"):
        mixer_period("ME*E")


def test_dense_model_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="--num-experts"):
        card_from_megatron_args(parse_megatron_argv(["--num-layers", "2", "--hidden-size", "64",
                                                     "--num-attention-heads", "4"]))
