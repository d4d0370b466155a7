"""A config.json that contradicts the card names the catalogue's card that fits it, or says that none does.

"pick the card of this checkpoint with --model" alone sent the holder of, say, a later Qwen3-30B-A3B release (the
same tensors, another RoPE base) looking for a card that does not exist, and the holder of another model's checkpoint
looking through the catalogue for the one that does.
"""
from __future__ import annotations

import json
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.hf_config import check_hf_config


def _config_of(name: str, **changes: object) -> str:
    """The ``config.json`` text transformers writes for card ``name``, with ``changes`` set in it."""
    card = get_card(name)
    config = family_module(card).hf_config_from_card(card).to_dict()
    config.update(changes)
    return json.dumps(config)


@pytest.mark.parametrize(("checkpoint", "given"), [
    ("qwen3-235b-a22b", "qwen3-30b-a3b"),
    ("qwen3-30b-a3b", "qwen3-235b-a22b"),
    ("qwen3-235b-a22b-proxy-2L", "qwen3-30b-a3b-proxy-2L"),
    ("qwen3.5-35b-a3b-proxy-8L", "qwen3.5-35b-a3b-proxy-4L"),
    ("qwen3.5-35b-a3b", "qwen3.5-35b-a3b-tiny"),
])
def test_another_cards_config_names_that_card(checkpoint: str, given: str) -> None:
    """The refusal names the card whose config it is (a proxy of the config's own depth included)."""
    with pytest.raises(ConversionError) as refused:
        check_hf_config(get_card(given), _config_of(checkpoint), "config.json")
    assert str(refused.value).endswith(f"pick the card of this checkpoint with --model ({checkpoint} fits it)")


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3-235b-a22b-proxy-2L"])
def test_a_config_no_card_fits_says_so(name: str) -> None:
    """Another RoPE base (fresh each run, never a card's) fits no card: the refusal says a card of its own is needed."""
    card = get_card(name)
    theta = float(random.choice([base for base in (5e5, 1e6, 2e6, 5e6, 1e7, 2e7) if base != card.rotary_base]))
    rope = {"rope_type": "default", "rope_theta": theta}
    if card.rotary_percent != 1.0:
        rope["partial_rotary_factor"] = card.rotary_percent
    with pytest.raises(ConversionError, match=rf"rope_parameters\.rope_theta: checkpoint {theta}") as refused:
        check_hf_config(card, _config_of(name, rope_parameters=rope), "config.json")
    assert str(refused.value).endswith("pick the card of this checkpoint with --model: no card of megatron-oellm "
                                       "fits it (`oellm models` lists them), so converting it needs a card of its "
                                       "own (megatron/oellm/cards.py)")


def test_a_config_another_fix_was_given_for_keeps_that_fix() -> None:
    """A config given on its own (``--hf-config``) keeps its caller's remedy: no catalogue search is added."""
    with pytest.raises(ConversionError) as refused:
        check_hf_config(get_card("qwen3-30b-a3b"), _config_of("qwen3-235b-a22b"), "config.json",
                        fix="give the config of this checkpoint")
    assert str(refused.value).endswith("; give the config of this checkpoint")


@pytest.mark.parametrize(("checkpoint", "given", "fits"), [
    ("qwen3.5-35b-a3b", "qwen3-30b-a3b", "qwen3.5-35b-a3b"),
    ("qwen3-235b-a22b-proxy-2L", "qwen3.5-35b-a3b-proxy-4L", "qwen3-235b-a22b-proxy-2L"),
])
def test_a_config_of_the_other_family_names_its_card(checkpoint: str, given: str, fits: str) -> None:
    """The model type is compared first; the refusal still names the card of the other family that fits."""
    with pytest.raises(ConversionError, match=r"model_type: checkpoint") as refused:
        check_hf_config(get_card(given), _config_of(checkpoint), "config.json")
    assert str(refused.value).endswith(f"pick the card of this checkpoint with --model ({fits} fits it)")


def test_another_cards_config_of_another_vocabulary_names_card_and_vocabulary() -> None:
    """A card whose only difference is the vocabulary fits with ``--vocab-size``: the refusal names both."""
    vocab = get_card("qwen3-235b-a22b").vocab_size + random.randrange(1, 4096)
    with pytest.raises(ConversionError) as refused:
        check_hf_config(get_card("qwen3-30b-a3b"), _config_of("qwen3-235b-a22b", vocab_size=vocab), "config.json")
    assert str(refused.value).endswith(f"(qwen3-235b-a22b with --vocab-size {vocab} fits it)")


def test_a_config_leaving_out_a_field_is_not_told_no_card_fits() -> None:
    """A config that leaves out a field (transformers' default then contradicts the card) may be the card's own:
    stating the field is the fix, so no "needs a card of its own" is added."""
    config = json.loads(_config_of("qwen3-30b-a3b"))
    del config["norm_topk_prob"]
    with pytest.raises(ConversionError, match=r"norm_topk_prob: checkpoint False, card True") as refused:
        check_hf_config(get_card("qwen3-30b-a3b"), json.dumps(config), "config.json")
    assert str(refused.value).endswith("pick the card of this checkpoint with --model, or state the fields it leaves "
                                       "out in config.json")
