"""Megatron's vocabulary padding on the way back to Hugging Face: extra rows pass as padding only when megatron's
padding of the card's vocabulary explains them, and stripping cuts the vocabulary tensors only, back to their
original rows."""

from __future__ import annotations

import argparse

import pytest
import torch

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS, stored_padded_vocab, strip_vocab_rows


def test_stripping_cuts_the_vocabulary_tensors_only() -> None:
    generator = torch.Generator().manual_seed(3)
    original = {name: torch.randn(300, 8, generator=generator).bfloat16() for name in VOCAB_TENSORS}
    padded = {name: torch.cat([tensor, torch.randn(84, 8, generator=generator).bfloat16()])
              for name, tensor in original.items()}
    padded["decoder.final_layernorm.weight"] = norm = torch.randn(384, generator=generator)
    stripped = strip_vocab_rows(padded, 300)
    assert all(torch.equal(stripped[name], original[name]) for name in VOCAB_TENSORS)
    assert stripped["decoder.final_layernorm.weight"] is norm


def rows(count: int) -> dict[str, int]:
    """Both vocabulary tensors stored with ``count`` rows."""
    return dict.fromkeys(VOCAB_TENSORS, count)


def test_rows_megatrons_padding_explains_are_padding() -> None:
    assert stored_padded_vocab(151936, rows(151936)) == 151936
    assert stored_padded_vocab(151936, rows(152064)) == 152064  # TP 2, no run arguments stored
    assert stored_padded_vocab(300, rows(384)) == 384  # TP 1
    assert stored_padded_vocab(300, {VOCAB_TENSORS[0]: 512}) == 512  # TP 2, tied output layer
    assert stored_padded_vocab(300, {}) == 300
    run = argparse.Namespace(make_vocab_size_divisible_by=128, tensor_model_parallel_size=2, padded_vocab_size=512)
    assert stored_padded_vocab(300, rows(512), run) == 512


def test_rows_megatrons_padding_does_not_explain_are_refused() -> None:
    with pytest.raises(ConversionError, match="different row counts"):
        stored_padded_vocab(300, {VOCAB_TENSORS[0]: 384, VOCAB_TENSORS[1]: 512})
    with pytest.raises(ConversionError, match="fewer than the card's vocabulary of 300"):
        stored_padded_vocab(300, rows(256))
    # a run trained on a 262,144-token vocabulary converted with the 248,320-token Qwen3.5 card
    with pytest.raises(ConversionError, match=r"262144 rows, but megatron pads the card's 248320 tokens to 248320 "
                                              r"or 248832 .* pass the run's --vocab-size to oellm convert"):
        stored_padded_vocab(248320, rows(262144))
    run = argparse.Namespace(make_vocab_size_divisible_by=128, tensor_model_parallel_size=1, padded_vocab_size=512)
    with pytest.raises(ConversionError, match=r"to 384 at TP 1 x make-vocab-size-divisible-by 128"):
        stored_padded_vocab(300, rows(512), run)


@pytest.mark.parametrize("stored", [{"make_vocab_size_divisible_by": 128}, {"tensor_model_parallel_size": 2}])
def test_run_arguments_missing_one_padding_field_fall_back_to_the_plausible_sizes(stored) -> None:
    """A checkpoint whose stored arguments lack the divisor or the TP size is judged as one without arguments:
    300 tokens padded at TP 2 x 128 are 512 rows (no crash on the missing field)."""
    assert stored_padded_vocab(300, rows(512), argparse.Namespace(**stored)) == 512
    with pytest.raises(ConversionError, match="no run arguments stored"):
        stored_padded_vocab(300, rows(500), argparse.Namespace(**stored))
