"""Checks of the tensors a conversion reads and writes: the Hugging Face tensors' names, shapes and dtypes against
the card (before anything is written), one dtype per megatron checkpoint tensor (the way back gives each its own),
and NaN or infinity in the weights (named, not refused: the conversion reproduces what it reads)."""

from __future__ import annotations

import re
import warnings
from collections import defaultdict
from collections.abc import Callable

import torch

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.errors import ConversionError, ConversionWarning
from megatron.oellm.convert.family import expected_shapes
from megatron.oellm.convert.vocab_padding import HF_VOCAB_TENSORS, vocab_size_fix

WEIGHT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
"""Dtypes a converted weight may have (a quantized or integer checkpoint is refused)."""
_FUSED_EXPERTS = re.compile(r"^(.*\.mlp\.experts\.)(gate_up_proj|down_proj)$")
"""A transformers 5.x in-memory expert tensor (all experts fused), counted per expert."""


def check_hf_tensors(card: ModelCard, tensors: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> None:
    """Raise naming the first missing, unexpected, mis-shaped or not floating-point tensor of ``tensors`` (name ->
    (shape, dtype)); fused expert tensors count per expert, and an expert held in both layouts is refused."""
    expected = expected_shapes(card)[0]
    covered = {}
    for name, (shape, dtype) in tensors.items():
        fused = _FUSED_EXPERTS.match(name)
        if not fused:
            covered[name] = (shape, dtype)
            continue
        prefix, kind = fused[1], fused[2]
        e, f, h = card.num_experts, card.moe_ffn_hidden_size, card.hidden_size
        want = (e, 2 * f, h) if kind == "gate_up_proj" else (e, h, f)
        if shape != want:
            raise ConversionError(f"tensor {name!r} has shape {list(shape)}, card {card.name} expects {list(want)}")
        parts = ("gate_proj", "up_proj") if kind == "gate_up_proj" else ("down_proj",)
        for i in range(e):
            for part in parts:
                per_expert = f"{prefix}{i}.{part}.weight"
                if per_expert in tensors:
                    raise ConversionError(f"tensors {name!r} and {per_expert!r} both hold expert {i}'s {part} weights "
                                          "(fused and per-expert layout); the conversion would take one and drop the "
                                          "other: keep the checkpoint's files of one save")
                covered[per_expert] = (expected.get(per_expert), dtype)
    missing = [n for n in expected if n not in covered]
    if missing:
        raise ConversionError(f"missing tensor {missing[0]!r} ({len(missing)} missing) for card {card.name}")
    unexpected = [n for n in covered if n not in expected]
    if unexpected:
        raise ConversionError(f"unexpected tensor {unexpected[0]!r} ({len(unexpected)} unexpected) for card "
                              f"{card.name}; is --model the right card?")
    for name, (shape, dtype) in covered.items():
        if tuple(shape) != expected[name]:
            vocab = (f"; {vocab_size_fix(shape[0])}"
                     if name in HF_VOCAB_TENSORS and tuple(shape[1:]) == expected[name][1:] else "")
            raise ConversionError(f"tensor {name!r} has shape {list(shape)}, card {card.name} expects "
                                  f"{list(expected[name])}{vocab}")
        if dtype not in WEIGHT_DTYPES:
            raise ConversionError(f"tensor {name!r} has dtype {dtype}; weights must be one of "
                                  f"{', '.join(map(str, WEIGHT_DTYPES))}")


def check_one_dtype_per_key(chunks: list[tuple[mcore_layout.Piece, torch.dtype]],
                            hf_names: Callable[[str], list[str]]) -> None:
    """Raise if tensors stored in one checkpoint tensor (the layers of a ``GPTModel``, the experts of a layer) differ
    in dtype: that tensor has one dtype, so the way back would change some of them. The message names HF tensors,
    those ``hf_names`` gives for a megatron tensor (what it is made of, as the user's files name them): the odd one
    out when its dtype is held by fewer megatron tensors of the key than every other dtype (the first of them in
    checkpoint order), stored with the first tensor of the most common dtype; on a tie for fewest (two layers of two
    dtypes) none is called odd: the first tensor of each dtype is named."""
    names: dict[str, dict[torch.dtype, list[str]]] = defaultdict(lambda: defaultdict(list))
    for piece, dtype in chunks:
        names[piece.key][dtype].append(piece.name)
    for key, by_dtype in names.items():
        if len(by_dtype) < 2:
            continue
        groups = sorted(by_dtype.items(), key=lambda item: len(item[1]))  # stable: checkpoint order on a tie
        where = f"in one megatron checkpoint tensor {key!r}, which has one dtype; save the checkpoint in one dtype"
        (odd_dtype, odd), (main_dtype, main) = groups[0], groups[-1]
        if len(odd) < len(groups[1][1]):
            odd_names = hf_names(odd[0])
            verb = "is" if len(odd_names) == 1 else "are"
            total = sum(map(len, by_dtype.values()))
            more = f" (so are {len(odd) - 1} more of the {total} stored there)" if len(odd) > 1 else ""
            raise ConversionError(f"{_quoted(odd_names)} {verb} {odd_dtype}{more} but {verb} stored with "
                                  f"{_quoted(hf_names(main[0]))} ({main_dtype}) {where}")
        each = " and ".join(f"{_quoted(hf_names(tensors[0]))} ({dtype})" for dtype, tensors in by_dtype.items())
        raise ConversionError(f"{each} differ in dtype but are stored {where}")


def _quoted(names: list[str]) -> str:
    """``names`` quoted and joined with "and": the HF tensors one megatron tensor is made of."""
    return " and ".join(map(repr, names))


_COUNT_CHUNK = 2**24
"""Elements counted at a time by :func:`warn_non_finite` (a 16 MiB mask, whatever the tensor's size)."""


def warn_non_finite(tensors: dict[str, torch.Tensor]) -> None:
    """One warning per tensor of ``tensors`` holding NaN or infinity, with how many elements: the conversion keeps
    them (it reproduces what it reads), and a run from such weights stops at its first NaN loss, after its wait in
    the queue. A sum finds them in one pass without a copy (a cast to float32 would copy the tensor); only a tensor
    it flags, or an FP8 one (which has no such kernels: read as float32, whose range holds every FP8 format's), is
    counted, in chunks of :data:`_COUNT_CHUNK` elements."""
    for name, tensor in tensors.items():
        if not tensor.is_floating_point() or not tensor.numel():
            continue
        one_byte = tensor.element_size() == 1  # FP8: no sum or isfinite kernels; read in float32 chunks
        if one_byte or not torch.isfinite(tensor.sum()):
            flat = tensor.reshape(-1)
            chunks = (flat[start:start + _COUNT_CHUNK] for start in range(0, flat.numel(), _COUNT_CHUNK))
            bad = sum(int((~torch.isfinite(chunk.float() if one_byte else chunk)).sum()) for chunk in chunks)
            if bad:  # a float16 sum past its range is no damage
                warnings.warn(f"{name}: {bad} of {tensor.numel()} elements are NaN or infinite (kept as they are: "
                              "a run from these weights stops at its first NaN loss); check the source checkpoint",
                              ConversionWarning, stacklevel=2)
