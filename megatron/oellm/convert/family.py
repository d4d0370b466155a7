"""The conversion units of a model and the family converter module that maps them.

A model is converted in units: ``"embedding"``, each decoder layer ``0 .. num_layers-1`` (HF numbering), and
``"head"`` (final norm + output layer). Each family module ``megatron.oellm.models.<family>.convert`` provides

* ``hf_config_from_card(card)``: the transformers config of the card;
* ``layer_prefixes(layer) -> (hf, mcore_mixer, mcore_moe)``: where HF layer ``layer``'s tensors live on each side;
* ``mixer_hf_to_mcore(card, layer, hf, hf_prefix, mcore_prefix)`` / ``mixer_mcore_to_hf(card, layer, mcore,
  mcore_prefix, hf_prefix)`` / ``mixer_shapes(card, layer, hf_prefix, mcore_prefix)``: the token mixer of a layer
  with its input norm (the rest of a decoder layer, post-attention norm and MoE, is the same for every family);
* ``FINAL_NORM``: megatron's final-norm weight name; ``MCORE_MODEL``: ``"gpt"`` or ``"hybrid"`` (selects the
  distributed-checkpoint key layout).

The unit maps and whole-model functions here are shared by every family, so the streaming path (one unit in
memory) and the in-memory API use the same maps.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType

from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import blocks
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


def hf_to_mcore_unit(card: ModelCard, unit: Unit, hf: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Megatron tensors of one unit (``"embedding"``, an HF layer index, ``"head"``) from HF tensors."""
    module = family_module(card)
    if unit == EMBEDDING:
        return blocks.embedding_hf_to_mcore(card, hf)
    if unit == HEAD:
        return blocks.head_hf_to_mcore(card, hf, module.FINAL_NORM)
    hp, mixer, moe = module.layer_prefixes(unit)
    out = module.mixer_hf_to_mcore(card, unit, hf, hp, f"{mixer}self_attention.")
    out[f"{moe}pre_mlp_layernorm.weight"] = blocks.take(hf, f"{hp}post_attention_layernorm.weight")
    out.update(blocks.moe_hf_to_mcore(card, hf, f"{hp}mlp.", f"{moe}mlp."))
    return out


def mcore_to_hf_unit(card: ModelCard, unit: Unit, mcore: Mapping[str, Tensor],
                     fused_experts: bool = False) -> dict[str, Tensor]:
    """HF tensors of one unit from megatron tensors (inverse of :func:`hf_to_mcore_unit`)."""
    module = family_module(card)
    if unit == EMBEDDING:
        return blocks.embedding_mcore_to_hf(card, mcore)
    if unit == HEAD:
        return blocks.head_mcore_to_hf(card, mcore, module.FINAL_NORM)
    hp, mixer, moe = module.layer_prefixes(unit)
    out = module.mixer_mcore_to_hf(card, unit, mcore, f"{mixer}self_attention.", hp)
    out[f"{hp}post_attention_layernorm.weight"] = blocks.take(mcore, f"{moe}pre_mlp_layernorm.weight")
    out.update(blocks.moe_mcore_to_hf(card, mcore, f"{moe}mlp.", f"{hp}mlp.", fused_experts))
    return out


def unit_shapes(card: ModelCard, unit: Unit) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) names and shapes of one unit; HF experts per expert."""
    module = family_module(card)
    if unit == EMBEDDING:
        return blocks.embedding_shapes(card)
    if unit == HEAD:
        return blocks.head_shapes(card, module.FINAL_NORM)
    hp, mixer, moe = module.layer_prefixes(unit)
    hf, mcore = module.mixer_shapes(card, unit, hp, f"{mixer}self_attention.")
    hf[f"{hp}post_attention_layernorm.weight"] = mcore[f"{moe}pre_mlp_layernorm.weight"] = (card.hidden_size,)
    moe_hf, moe_mcore = blocks.moe_shapes(card, f"{hp}mlp.", f"{moe}mlp.")
    return hf | moe_hf, mcore | moe_mcore


def expected_shapes(card: ModelCard) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """All (HF, megatron) tensor names and shapes of ``card``; HF experts in the per-expert layout."""
    hf, mcore = {}, {}
    for unit in units(card):
        unit_hf, unit_mcore = unit_shapes(card, unit)
        hf.update(unit_hf)
        mcore.update(unit_mcore)
    return hf, mcore


def iter_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor]) -> Iterator[tuple[Unit, dict[str, Tensor]]]:
    """Megatron tensors of each unit in turn; ``hf`` may be lazy (only the unit's tensors are read).

    ``hf`` may use published names (``model.language_model.``, vision tower and MTP ignored).
    """
    hf = CanonicalView(hf)
    for unit in units(card):
        yield unit, hf_to_mcore_unit(card, unit, hf)


def iter_mcore_to_hf(card: ModelCard, mcore: Mapping[str, Tensor],
                     fused_experts: bool = False) -> Iterator[tuple[Unit, dict[str, Tensor]]]:
    """HF tensors of each unit in turn; ``fused_experts`` gives transformers' in-memory expert layout."""
    for unit in units(card):
        yield unit, mcore_to_hf_unit(card, unit, mcore, fused_experts)


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
