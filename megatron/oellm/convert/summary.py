"""What a conversion reports: the summary both directions return to ``oellm convert``, and the shared figures."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.output import leftover_staging_note
from megatron.oellm.convert.safetensors_io import tensor_nbytes


@dataclass(frozen=True)
class ConversionSummary:
    """What a conversion did, for the command's report."""

    output: Path
    tensors_read: int
    tensors_written: int
    skipped: list[str]
    """Source tensors left out: a published HF checkpoint's vision tower and MTP head and an older checkpoint's RoPE
    ``rotary_emb.inv_freq`` buffers (hf-to-mcore), a megatron checkpoint's multi-token-prediction block
    (mcore-to-hf)."""
    padding_rows: int = 0
    """Vocabulary rows megatron padded past the card's vocabulary, dropped by mcore-to-hf (per vocabulary tensor)."""
    notes: list[str] = field(default_factory=list)
    """Lines for the report: where the HF config came from or went, or that there was none."""
    source: str = ""
    """A report line naming the checkpoint read, printed under the first (mcore-to-hf: its iteration directory and
    iteration)."""


CONVERTED_LOAD_STRICTNESS = "log_unexpected"
"""The ``--dist-ckpt-strictness`` an hf-to-mcore checkpoint loads under: it holds no ``_extra_state`` objects, which
megatron's default strictness fails on and the training entry therefore refuses
(``megatron.oellm.training.load_checks.CONVERTED_LOAD_STRICTNESS`` lists every value that loads it)."""


def training_flags(card_name: str, out_dir: Path, vocab_size: int | None = None) -> str:
    """The training entry's flags that start a run of card ``card_name`` from the hf-to-mcore checkpoint in
    ``out_dir`` (converted with ``--vocab-size vocab_size``, if given), for the report.

    ``--pretrained-checkpoint``: megatron-core loads it while the run's own ``--load`` holds no checkpoint and then
    fine-tunes (iteration 0, no optimizer or RNG state, no comparison of the run arguments a converted checkpoint
    does not store; ``--load OUT`` would compare them under ``--vocab-file`` and fail).
    :data:`CONVERTED_LOAD_STRICTNESS` lets its loader pass over the ``_extra_state`` keys the checkpoint lacks.
    ``--vocab-size``: the run's model then has the checkpoint's vocabulary rows."""
    flags = [f"--oellm-model {card_name}"]
    if vocab_size is not None:
        flags.append(f"--vocab-size {vocab_size}")
    flags += [f"--pretrained-checkpoint {shlex.quote(str(out_dir))}",
              f"--dist-ckpt-strictness {CONVERTED_LOAD_STRICTNESS}"]
    return " ".join(flags)


def bytes_of(pieces: Iterable[tuple[mcore_layout.Piece, torch.dtype]]) -> int:
    """Bytes of the tensor data in ``pieces`` (each with its dtype): what the output needs on disk, give or take the
    format's metadata."""
    return sum(tensor_nbytes(piece.chunk_shape, dtype) for piece, dtype in pieces)


def leftover_notes(out_dir: Path) -> list[str]:
    """A report line naming partial outputs that killed conversions into ``out_dir`` left beside it, if any."""
    note = leftover_staging_note(out_dir)
    return [note] if note else []
