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
