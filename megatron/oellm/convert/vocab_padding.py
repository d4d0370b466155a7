"""Megatron's vocabulary padding on the way back to Hugging Face.

Megatron pads the vocabulary of the input embedding and the output layer to a multiple of
``make_vocab_size_divisible_by x tensor_model_parallel_size`` and saves the padded tensors: Qwen3's 151,936 tokens
are already a multiple of 128 (TP 1) but are saved as 152,064 rows by a run at TP 2. ``mcore-to-hf`` drops the rows
past the card's vocabulary (no token id reaches them). The other direction needs nothing: megatron loads these two
tensors with ``allow_shape_mismatch`` and fills the padding rows with zeros. A run with a Hugging Face tokenizer
builds them from the tokenizer's length, not the card's vocabulary: with a shorter tokenizer megatron loads only the
rows it builds, and saves fewer rows than the card has (exported with the run's ``--vocab-size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.flops import MEGATRON_VOCAB_DIVISOR, megatron_padded_vocab

VOCAB_TENSORS = ("embedding.word_embeddings.weight", "output_layer.weight")
"""Megatron state-dict tensors with one row per vocabulary entry."""
HF_VOCAB_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")
"""Their Hugging Face counterparts."""
PLAUSIBLE_TP_SIZES = (1, 2, 4, 8, 16, 32, 64)
"""Tensor-parallel sizes whose padding is accepted when a checkpoint does not store its run's arguments."""


def strip_vocab_rows(tensors: Mapping[str, Tensor], vocab_size: int) -> dict[str, Tensor]:
    """``tensors`` with each :data:`VOCAB_TENSORS` entry cut to its first ``vocab_size`` rows; the others unchanged."""
    return {name: tensor[:vocab_size] if name in VOCAB_TENSORS else tensor for name, tensor in tensors.items()}


def stored_padded_vocab(vocab_size: int, stored_rows: Mapping[str, int], megatron_args: Any = None) -> int:
    """The padded vocabulary of a megatron checkpoint from the rows of its stored :data:`VOCAB_TENSORS`
    (``stored_rows``: tensor -> rows, the ones present).

    Extra rows are accepted only as megatron's padding of the card's ``vocab_size``: the padding of the saving run's
    ``make_vocab_size_divisible_by`` x ``tensor_model_parallel_size`` when the checkpoint holds megatron's ``args``
    (training checkpoints do), else the default divisor's padding at some tensor-parallel size in
    :data:`PLAUSIBLE_TP_SIZES`. Anything else (fewer rows, tensors that disagree, a run trained on another
    vocabulary) is a :class:`ConversionError`: dropping real token rows must not pass as padding. Fewer rows that
    the run's stored ``padded_vocab_size`` explains are named as what they are: megatron sized the vocabulary tensors
    from a Hugging Face tokenizer's length (shorter than the card's vocabulary, e.g. Qwen3's 151,669 tokens for 151,936
    rows), and the run's ``--vocab-size`` exports them.
    """
    rows = set(stored_rows.values())
    if len(rows) > 1:
        raise ConversionError(f"the vocabulary tensors have different row counts ({dict(stored_rows)}); a megatron "
                              "checkpoint pads both to the same size")
    padded = rows.pop() if rows else vocab_size
    if padded == vocab_size:
        return padded
    if padded < vocab_size:
        if getattr(megatron_args, "padded_vocab_size", None) == padded:
            raise ConversionError(f"the checkpoint's vocabulary tensors have {padded} rows, fewer than the card's "
                                  f"vocabulary of {vocab_size}: the saving run built them for its tokenizer (megatron "
                                  f"pads the tokenizer's length, not the card's vocabulary, to the padded_vocab_size "
                                  f"{padded} its arguments store); pass the run's vocabulary with --vocab-size: the "
                                  f"tokenizer's length, or {padded} for every row")
        raise ConversionError(f"the checkpoint's vocabulary tensors have {padded} rows, fewer than the card's "
                              f"vocabulary of {vocab_size}; is --model the right card?")
    divisor = getattr(megatron_args, "make_vocab_size_divisible_by", None)
    tp = getattr(megatron_args, "tensor_model_parallel_size", None)
    if isinstance(divisor, int) and isinstance(tp, int):
        expected = {megatron_padded_vocab(vocab_size, tp, divisor)}
        how = f"at TP {tp} x make-vocab-size-divisible-by {divisor} (the saving run's arguments)"
    else:
        expected = {megatron_padded_vocab(vocab_size, tp) for tp in PLAUSIBLE_TP_SIZES}
        how = f"at TP {'/'.join(map(str, PLAUSIBLE_TP_SIZES))} x {MEGATRON_VOCAB_DIVISOR} (no run arguments stored)"
    if padded not in expected:
        raise ConversionError(f"the checkpoint's vocabulary tensors have {padded} rows, but megatron pads the card's "
                              f"{vocab_size} tokens to {' or '.join(map(str, sorted(expected)))} {how}; the run "
                              f"trained another vocabulary: {_run_vocab_fix(padded, megatron_args)}")
    return padded


def run_vocab_for_rows(megatron_args: Any, padded: int) -> int | None:
    """The ``--vocab-size`` a training run's stored ``megatron_args`` hold where megatron pads it (at the run's
    tensor-parallel size and divisor) to exactly ``padded`` vocabulary rows; None where they hold none or another.
    What the export takes as the run's vocabulary, and what its refusal names."""
    run_vocab, tp, divisor = (getattr(megatron_args, key, None) for key in
                              ("vocab_size", "tensor_model_parallel_size", "make_vocab_size_divisible_by"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (run_vocab, tp, divisor)):
        return None
    return run_vocab if megatron_padded_vocab(run_vocab, tp, divisor) == padded else None


def _run_vocab_fix(padded: int, megatron_args: Any) -> str:
    """What to pass for a checkpoint whose ``padded`` vocabulary rows are not the card's: the exact ``--vocab-size``
    of the saving run (:func:`run_vocab_for_rows`), else the run's ``--vocab-size`` in words."""
    run_vocab = run_vocab_for_rows(megatron_args, padded)
    if run_vocab is not None:
        return f"pass --vocab-size {run_vocab} (the saving run's) to oellm convert"
    return "pass the run's --vocab-size to oellm convert"


def vocab_size_fix(vocab_size: int) -> str:
    """What to do with an HF checkpoint whose only difference from the card is a vocabulary of ``vocab_size``
    tokens: no other card fits it, the card with that vocabulary does."""
    return f"pass --vocab-size {vocab_size} to convert with the card's vocabulary set to it"
