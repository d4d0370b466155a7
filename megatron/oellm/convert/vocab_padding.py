"""Megatron's vocabulary padding on the way back to Hugging Face.

Megatron pads the vocabulary of the input embedding and the output layer to a multiple of
``make_vocab_size_divisible_by x tensor_model_parallel_size`` and saves the padded tensors: Qwen3's 151,936 tokens
are already a multiple of 128 (TP 1) but are saved as 152,064 rows by a run at TP 2. ``mcore-to-hf`` drops the rows
past the card's vocabulary (no token id reaches them). The other direction needs nothing: megatron loads these two
tensors with ``allow_shape_mismatch`` and fills the padding rows with zeros.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from megatron.oellm.convert.errors import ConversionError

VOCAB_TENSORS = ("embedding.word_embeddings.weight", "output_layer.weight")
"""Megatron state-dict tensors with one row per vocabulary entry."""


def strip_vocab_rows(tensors: Mapping[str, Tensor], vocab_size: int) -> dict[str, Tensor]:
    """``tensors`` with each :data:`VOCAB_TENSORS` entry cut to its first ``vocab_size`` rows; the others unchanged."""
    return {name: tensor[:vocab_size] if name in VOCAB_TENSORS else tensor for name, tensor in tensors.items()}


def stored_padded_vocab(vocab_size: int, stored_rows: Mapping[str, int]) -> int:
    """The padded vocabulary of a megatron checkpoint from the rows of its stored :data:`VOCAB_TENSORS`
    (``stored_rows``: tensor -> rows, the ones present); a :class:`ConversionError` when they disagree or hold fewer
    rows than the card's vocabulary ``vocab_size``."""
    rows = set(stored_rows.values())
    if len(rows) > 1:
        raise ConversionError(f"the vocabulary tensors have different row counts ({dict(stored_rows)}); a megatron "
                              "checkpoint pads both to the same size")
    padded = rows.pop() if rows else vocab_size
    if padded < vocab_size:
        raise ConversionError(f"the checkpoint's vocabulary tensors have {padded} rows, fewer than the card's "
                              f"vocabulary of {vocab_size}; is --model the right card?")
    return padded
