"""The conversion units of a model and the family converter module that maps them.

A model is converted in units: ``"embedding"``, each decoder layer ``0 .. num_layers-1`` (HF numbering), and
``"head"`` (final norm + output layer). Each family module ``megatron.oellm.models.<family>.convert`` provides

* ``hf_config_from_card(card)``: the transformers config of the card;
* ``unit_shapes(card, unit) -> (hf_shapes, mcore_shapes)``: expected names and shapes of one unit;
* ``hf_to_mcore_unit(card, unit, hf)`` / ``mcore_to_hf_unit(card, unit, mcore, fused_experts)``;
* ``MCORE_MODEL``: ``"gpt"`` or ``"hybrid"`` (selects the distributed-checkpoint key layout).

The whole-model functions here loop over units, so the streaming path (one unit in memory) and the in-memory API
share the same maps.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType

from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.hf_names import CanonicalView

Unit = int | str
EMBEDDING = "embedding"
HEAD = "head"


def units(card: ModelCard) -> list[Unit]:
    """The conversion units of ``card`` in checkpoint order."""
    return [EMBEDDING, *range(card.num_layers), HEAD]


def family_module(card: ModelCard) -> ModuleType:
    """The converter module of ``card.family``; a :class:`ConversionError` if the family has none."""
    try:
        return importlib.import_module(f"megatron.oellm.models.{card.family}.convert")
    except ModuleNotFoundError as error:
        raise ConversionError(f"{card.name}: family {card.family!r} has no checkpoint converter "
                              "(megatron/oellm/models/<family>/convert.py)") from error


def expected_shapes(card: ModelCard) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """All (HF, megatron) tensor names and shapes of ``card``; HF experts in the per-expert layout."""
    module = family_module(card)
    hf, mcore = {}, {}
    for unit in units(card):
        unit_hf, unit_mcore = module.unit_shapes(card, unit)
        hf.update(unit_hf)
        mcore.update(unit_mcore)
    return hf, mcore


def iter_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor]) -> Iterator[tuple[Unit, dict[str, Tensor]]]:
    """Megatron tensors of each unit in turn; ``hf`` may be lazy (only the unit's tensors are read).

    ``hf`` may use published names (``model.language_model.``, vision tower and MTP ignored).
    """
    module = family_module(card)
    hf = CanonicalView(hf)
    for unit in units(card):
        yield unit, module.hf_to_mcore_unit(card, unit, hf)


def iter_mcore_to_hf(card: ModelCard, mcore: Mapping[str, Tensor],
                     fused_experts: bool = False) -> Iterator[tuple[Unit, dict[str, Tensor]]]:
    """HF tensors of each unit in turn; ``fused_experts`` gives transformers' in-memory expert layout."""
    module = family_module(card)
    for unit in units(card):
        yield unit, module.mcore_to_hf_unit(card, unit, mcore, fused_experts)


def hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The whole megatron state dict (TP=PP=EP=1 names, no ``_extra_state``) from HF tensors."""
    out: dict[str, Tensor] = {}
    for _, tensors in iter_hf_to_mcore(card, hf):
        out.update(tensors)
    return out


def mcore_to_hf(card: ModelCard, mcore: Mapping[str, Tensor], fused_experts: bool = False) -> dict[str, Tensor]:
    """The whole HF state dict from megatron tensors (``save_pretrained`` names unless ``fused_experts``)."""
    out: dict[str, Tensor] = {}
    for _, tensors in iter_mcore_to_hf(card, mcore, fused_experts):
        out.update(tensors)
    return out
