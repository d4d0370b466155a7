"""Megatron's vocabulary padding on the way back to Hugging Face: the padded size is read from the stored vocabulary
tensors, and stripping cuts those tensors only, back to their original rows."""

from __future__ import annotations

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


def test_stored_padding_is_read_from_the_vocabulary_tensors() -> None:
    assert stored_padded_vocab(300, {name: 384 for name in VOCAB_TENSORS}) == 384
    assert stored_padded_vocab(300, {VOCAB_TENSORS[0]: 300}) == 300
    assert stored_padded_vocab(300, {}) == 300
    with pytest.raises(ConversionError, match="different row counts"):
        stored_padded_vocab(300, {VOCAB_TENSORS[0]: 384, VOCAB_TENSORS[1]: 512})
    with pytest.raises(ConversionError, match="fewer than the card's vocabulary of 300"):
        stored_padded_vocab(300, {name: 256 for name in VOCAB_TENSORS})
