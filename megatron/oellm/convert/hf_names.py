"""Hugging Face tensor names as published vs as ``Qwen*ForCausalLM`` names them.

The published multimodal Qwen3.5 checkpoints store the text model under ``model.language_model.`` next to
``model.visual.`` (vision tower) and ``mtp.`` (multi-token-prediction head); transformers' ``*ForCausalLM`` and our
converter use ``model.`` and ignore the other two (text part only, no MTP).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from torch import Tensor

from megatron.oellm.convert.errors import ConversionError

SKIPPED_PREFIXES = ("model.visual.", "mtp.")
"""Parts of published checkpoints outside the text model; never converted."""
DERIVED_BUFFER_SUFFIX = ".rotary_emb.inv_freq"
"""The RoPE inverse frequencies that checkpoints saved by older transformers releases hold per attention layer
(``model.layers.N.self_attn.rotary_emb.inv_freq``): a buffer computed from the config's RoPE settings, which
transformers recomputes when it builds the model and does not load; never converted."""
_PUBLISHED_TEXT_PREFIX = "model.language_model."


def canonical_hf_names(names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """``({canonical name: stored name}, skipped stored names)`` for the tensor names of an HF checkpoint; two stored
    names of one canonical name (``model.X`` and ``model.language_model.X``) are a :class:`ConversionError`."""
    canonical, skipped = {}, []
    for name in names:
        if name.startswith(SKIPPED_PREFIXES) or is_derived_buffer(name):
            skipped.append(name)
            continue
        short = "model." + name[len(_PUBLISHED_TEXT_PREFIX):] if name.startswith(_PUBLISHED_TEXT_PREFIX) else name
        if short in canonical:
            raise ConversionError(f"tensors {canonical[short]!r} and {name!r} are both {short!r} of the text model; "
                                  "the checkpoint must hold one of them")
        canonical[short] = name
    return canonical, sorted(skipped)


def is_derived_buffer(name: str) -> bool:
    """Whether ``name`` is a buffer the HF model derives from its config (:data:`DERIVED_BUFFER_SUFFIX`), saved by
    older checkpoints and skipped: not a weight, so not a sign of a wrong card."""
    return name.endswith(DERIVED_BUFFER_SUFFIX)


class CanonicalView(Mapping[str, Tensor]):
    """Read-only view of HF tensors under canonical names; values are fetched from ``tensors`` on access."""

    def __init__(self, tensors: Mapping[str, Tensor]) -> None:
        self._tensors = tensors
        self._names, self.skipped = canonical_hf_names(tensors.keys())

    def __getitem__(self, name: str) -> Tensor:
        return self._tensors[self._names[name]]

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
