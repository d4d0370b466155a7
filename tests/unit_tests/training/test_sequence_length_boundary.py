"""A ``--seq-length`` of exactly ``max_position_embeddings`` is valid (megatron-core 0.19.2's ``validate_args``
asserts ``max_position_embeddings >= seq_length``); one token more is refused, naming the limit and where it came
from."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training.args import check_sequence_length, merge_card_flags, parse_oellm_argv

CARD = "qwen3-30b-a3b-tiny"


def test_the_limit_of_max_position_embeddings_is_inclusive():
    """Megatron's flags: ``--seq-length`` equal to ``--max-position-embeddings`` passes, one more is refused."""
    limit = random.randint(64, 8192)
    check_sequence_length(parse_oellm_argv(["--seq-length", str(limit), "--max-position-embeddings", str(limit)]))
    with pytest.raises(ValueError, match=rf"--seq-length {limit + 1} exceeds --max-position-embeddings "
                                         rf"max_position_embeddings {limit};"):
        check_sequence_length(parse_oellm_argv(["--seq-length", str(limit + 1), "--max-position-embeddings",
                                                str(limit)]))


def test_a_cards_limit_is_inclusive():
    """Under ``--oellm-model``: the card's ``max_position_embeddings`` as ``--seq-length`` passes, one more is
    refused naming the card."""
    limit = get_card(CARD).max_position_embeddings

    def parsed(length: int):
        return parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--seq-length", str(length)]).argv)

    check_sequence_length(parsed(limit))
    with pytest.raises(ValueError, match=rf"--seq-length {limit + 1} exceeds model card {CARD}'s "
                                         rf"max_position_embeddings {limit};"):
        check_sequence_length(parsed(limit + 1))


def test_only_a_limit_of_megatrons_flag_is_offered_to_raise():
    """Megatron's ``--max-position-embeddings`` may be raised; a card's limit may not (a flag contradicting the card
    is refused): the refusal without a card names both fixes, the one under ``--oellm-model`` the shorter length
    only."""
    limit = random.randint(64, 8192)
    length = limit + random.randint(1, limit)
    with pytest.raises(ValueError) as flags:
        check_sequence_length(parse_oellm_argv(["--seq-length", str(length), "--max-position-embeddings", str(limit)]))
    assert str(flags.value).endswith(f"; train with at most {limit} tokens per sequence or raise the limit")
    card_limit = get_card(CARD).max_position_embeddings
    card_length = card_limit + random.randint(1, card_limit)
    with pytest.raises(ValueError) as card:
        check_sequence_length(parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--seq-length",
                                                                 str(card_length)]).argv))
    assert str(card.value).endswith(f"; train with at most {card_limit} tokens per sequence")
