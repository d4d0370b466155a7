"""What a conversion reports: the summary both directions return to ``oellm convert``, and the shared figures."""

from __future__ import annotations

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


def bytes_of(pieces: Iterable[tuple[mcore_layout.Piece, torch.dtype]]) -> int:
    """Bytes of the tensor data in ``pieces`` (each with its dtype): what the output needs on disk, give or take the
    format's metadata."""
    return sum(tensor_nbytes(piece.chunk_shape, dtype) for piece, dtype in pieces)


def leftover_notes(out_dir: Path) -> list[str]:
    """A report line naming partial outputs that killed conversions into ``out_dir`` left beside it, if any."""
    note = leftover_staging_note(out_dir)
    return [note] if note else []
