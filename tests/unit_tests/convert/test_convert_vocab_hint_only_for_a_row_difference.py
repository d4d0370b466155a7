"""The tensor check's ``--vocab-size`` advice for a mis-shaped embedding or LM head: given only where the tensor
differs from the card in its rows alone (an extended vocabulary), never where its hidden size differs too (another
model, which no ``--vocab-size`` converts)."""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import expected_shapes
from megatron.oellm.convert.tensor_checks import check_hf_tensors
from megatron.oellm.convert.vocab_padding import HF_VOCAB_TENSORS

CARDS = ("qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny")


def _tensors(card_name: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Every HF tensor ``card_name`` expects, as (shape, dtype) in bfloat16."""
    return {name: (tuple(shape), torch.bfloat16) for name, shape in expected_shapes(get_card(card_name))[0].items()}


def _vocab_tensor(tensors: dict) -> str:
    """One of the card's vocabulary tensors (the LM head only where the card unties it)."""
    return random.choice([name for name in HF_VOCAB_TENSORS if name in tensors])


@pytest.mark.parametrize("card_name", CARDS)
def test_rows_alone_differing_name_the_vocab_size_that_fits(card_name: str) -> None:
    tensors = _tensors(card_name)
    name = _vocab_tensor(tensors)
    (rows, hidden), dtype = tensors[name]
    other = rows + random.choice([-1, 1]) * random.randrange(1, rows)
    tensors[name] = ((other, hidden), dtype)
    with pytest.raises(ConversionError) as refused:
        check_hf_tensors(get_card(card_name), tensors)
    assert str(refused.value).endswith(f"; pass --vocab-size {other} to convert with the card's vocabulary set to it")


@pytest.mark.parametrize("card_name", CARDS)
@pytest.mark.parametrize("rows_too", [False, True], ids=["hidden", "rows-and-hidden"])
def test_a_hidden_size_differing_names_no_vocab_size(card_name: str, rows_too: bool) -> None:
    """Fails if the advice is given for any mis-shaped vocabulary tensor: ``--vocab-size`` changes rows only."""
    tensors = _tensors(card_name)
    name = _vocab_tensor(tensors)
    (rows, hidden), dtype = tensors[name]
    other_rows = rows + random.randrange(1, 1000) if rows_too else rows
    other_hidden = hidden + random.choice([-1, 1]) * random.randrange(1, hidden)
    tensors[name] = ((other_rows, other_hidden), dtype)
    with pytest.raises(ConversionError) as refused:
        check_hf_tensors(get_card(card_name), tensors)
    message = str(refused.value)
    assert message == (f"tensor {name!r} has shape {[other_rows, other_hidden]}, card {card_name} expects "
                       f"{[rows, hidden]}"), message
