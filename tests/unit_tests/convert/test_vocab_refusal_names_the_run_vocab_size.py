"""A checkpoint of a run that trained another vocabulary is refused naming the exact ``--vocab-size`` its stored
arguments hold (where megatron pads it to the stored rows); it said only "pass the run's --vocab-size"."""

from __future__ import annotations

import argparse
import random

import pytest

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.vocab_padding import stored_padded_vocab
from megatron.oellm.flops import megatron_padded_vocab


def _run(card_vocab: int) -> tuple[int, int, int, int]:
    """(run vocabulary, tp, divisor, padded rows) of a random run whose padding is not the card's."""
    while True:
        run_vocab, tp = random.randrange(100, 200_000), random.choice([1, 2, 4, 8])
        divisor = random.choice([64, 128])
        padded = megatron_padded_vocab(run_vocab, tp, divisor)
        if padded > megatron_padded_vocab(card_vocab, tp, divisor):
            return run_vocab, tp, divisor, padded


@pytest.mark.parametrize("draw", range(3))
def test_the_stored_vocab_size_is_named(draw: int) -> None:
    card_vocab = random.randrange(100, 2000)
    run_vocab, tp, divisor, padded = _run(card_vocab)
    stored = argparse.Namespace(vocab_size=run_vocab, tensor_model_parallel_size=tp,
                                make_vocab_size_divisible_by=divisor, padded_vocab_size=padded)
    rows = {"embedding.word_embeddings.weight": padded, "output_layer.weight": padded}
    with pytest.raises(ConversionError, match=rf"pass --vocab-size {run_vocab} \(the saving run's\)"):
        stored_padded_vocab(card_vocab, rows, stored)
    assert stored_padded_vocab(run_vocab, rows, stored) == padded


def test_a_vocab_size_that_does_not_explain_the_rows_is_not_named() -> None:
    card_vocab = random.randrange(100, 2000)
    run_vocab, tp, divisor, padded = _run(card_vocab)
    stored = argparse.Namespace(vocab_size=padded + random.randrange(1000, 5000), tensor_model_parallel_size=tp,
                                make_vocab_size_divisible_by=divisor)
    rows = {"embedding.word_embeddings.weight": padded}
    with pytest.raises(ConversionError, match=r"pass the run's --vocab-size to oellm convert"):
        stored_padded_vocab(card_vocab, rows, stored)
