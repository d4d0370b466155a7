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
    in dtype: that tensor has one dtype, so the way back would change some of them. The message, one line, names HF
    tensors, those ``hf_names`` gives for a megatron tensor (what it is made of, as the user's files name them; a
    megatron tensor it gives none for is named as megatron's), and counts distinct HF tensors (a fused expert tensor
    feeds many megatron ones). Of two dtypes, the one fewer HF tensors have is the odd one out: its first megatron
    tensor's HF tensors (checkpoint order) are named with how many more share its dtype, stored with the first of the
    other dtype. On a tie (two layers of two dtypes), or with three dtypes or more, none is called odd: every dtype
    is named with its count and one example, most common first (checkpoint order on a tie), so that one fix of the
    files is enough."""
    names: dict[str, dict[torch.dtype, list[str]]] = defaultdict(lambda: defaultdict(list))
    for piece, dtype in chunks:
        names[piece.key][dtype].append(piece.name)
    for key, by_dtype in names.items():
        if len(by_dtype) > 1:
            raise ConversionError(_mixed_dtypes(key, by_dtype, hf_names))


_ADVICE = "save the checkpoint in one dtype"
"""What the refusal of one checkpoint tensor in differing dtypes tells the user to do."""


def _mixed_dtypes(key: str, by_dtype: dict[torch.dtype, list[str]], hf_names: Callable[[str], list[str]]) -> str:
    """The refusal of checkpoint tensor ``key`` whose megatron tensors (``by_dtype``: dtype -> names, checkpoint
    order) differ in dtype; see :func:`check_one_dtype_per_key`."""
    groups = sorted((_DtypeGroup(dtype, [_sources(hf_names, name) for name in tensors])
                     for dtype, tensors in by_dtype.items()), key=lambda group: -group.count)
    where = f"in one megatron checkpoint tensor {key!r}, which has one dtype"
    if len(groups) == 2 and groups[1].count < groups[0].count:
        odd, main = groups[1], groups[0]
        verb = "is" if len(odd.example) == 1 else "are"
        others = odd.count - len(odd.example)
        total = odd.count + main.count
        more = f" (as {'is' if others == 1 else 'are'} {others} more of the {total} HF tensors stored there)"
        return (f"{_quoted(odd.example)} {verb} {odd.dtype}{more if others else ''} but {verb} stored with "
                f"{_quoted(main.example)} ({main.dtype}) {where}; {_ADVICE}")
    each = "; ".join(group.described() for group in groups)
    return f"HF tensors in {len(groups)} dtypes are stored {where}: {each}; {_ADVICE}"


class _DtypeGroup:
    """The HF tensors of one dtype stored in one checkpoint tensor, from ``sources`` (those of each megatron tensor
    of that dtype, checkpoint order): ``count``, how many distinct ones; ``example``, the first megatron tensor's."""

    def __init__(self, dtype: torch.dtype, sources: list[list[str]]) -> None:
        self.dtype = dtype
        self.example = sources[0]
        self.count = len({name for names in sources for name in names})

    def described(self) -> str:
        """``3 in torch.float32 (e.g. 'a')``: the count, the dtype and the example (``e.g.`` unless it is all)."""
        example = _quoted(self.example)
        return f"{self.count} in {self.dtype} ({'e.g. ' if self.count > len(self.example) else ''}{example})"


def _sources(hf_names: Callable[[str], list[str]], name: str) -> list[str]:
    """What megatron tensor ``name`` is made of, as a refusal names it: its HF tensors, else (none found) the
    megatron tensor itself, said to be megatron's so that the user does not look for it in the HF files."""
    return [repr(source) for source in hf_names(name)] or [f"megatron's {name!r}"]


def _quoted(names: list[str]) -> str:
    """``names`` (quoted by :func:`_sources`) joined with "and": the HF tensors one megatron tensor is made of."""
    return " and ".join(names)


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
