"""Qwen3-MoE checkpoint maps: Hugging Face ``Qwen3MoeForCausalLM`` <-> megatron-core ``GPTModel`` (TE specs).

HF decoder layer ``i`` is megatron ``decoder.layers.{i}``: the input norm is fused into ``linear_qkv``
(``layer_norm_weight``), the post-attention norm is ``pre_mlp_layernorm``. Qwen3 RMSNorms are plain ``w * x``
and the card has ``zero_centered_norm=False``, so norm weights are copied unchanged. See README.md here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import blocks, family
from megatron.oellm.convert.family import EMBEDDING, HEAD, Unit

if TYPE_CHECKING:
    from transformers import Qwen3MoeConfig

MCORE_MODEL = "gpt"
FINAL_NORM = "decoder.final_layernorm.weight"


def hf_config_from_card(card: ModelCard) -> Qwen3MoeConfig:
    """The transformers ``Qwen3MoeConfig`` describing ``card`` (text model, every layer MoE)."""
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        vocab_size=card.vocab_size, hidden_size=card.hidden_size, num_hidden_layers=card.num_layers,
        num_attention_heads=card.num_attention_heads, num_key_value_heads=card.num_query_groups,
        head_dim=card.kv_channels, moe_intermediate_size=card.moe_ffn_hidden_size, num_experts=card.num_experts,
        num_experts_per_tok=card.moe_router_topk, norm_topk_prob=not card.moe_router_pre_softmax,
        decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=card.norm_epsilon,
        max_position_embeddings=card.max_position_embeddings, tie_word_embeddings=not card.untie_embeddings,
        router_aux_loss_coef=card.moe_aux_loss_coeff,
        rope_parameters={"rope_type": "default", "rope_theta": card.rotary_base},
        architectures=[card.hf_architecture or "Qwen3MoeForCausalLM"],
    )


def _prefixes(layer: int) -> tuple[str, str]:
    return f"model.layers.{layer}.", f"decoder.layers.{layer}."


def hf_to_mcore_unit(card: ModelCard, unit: Unit, hf: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Megatron tensors of one unit (``"embedding"``, a layer index, ``"head"``) from HF tensors."""
    if unit == EMBEDDING:
        return blocks.embedding_hf_to_mcore(card, hf)
    if unit == HEAD:
        return blocks.head_hf_to_mcore(card, hf, FINAL_NORM)
    hp, mp = _prefixes(unit)
    out = blocks.attention_hf_to_mcore(card, hf, f"{hp}self_attn.", f"{hp}input_layernorm.weight",
                                       f"{mp}self_attention.")
    out[f"{mp}pre_mlp_layernorm.weight"] = blocks.take(hf, f"{hp}post_attention_layernorm.weight")
    out.update(blocks.moe_hf_to_mcore(card, hf, f"{hp}mlp.", f"{mp}mlp."))
    return out


def mcore_to_hf_unit(card: ModelCard, unit: Unit, mcore: Mapping[str, Tensor],
                     fused_experts: bool = False) -> dict[str, Tensor]:
    """HF tensors of one unit from megatron tensors (inverse of :func:`hf_to_mcore_unit`)."""
    if unit == EMBEDDING:
        return blocks.embedding_mcore_to_hf(card, mcore)
    if unit == HEAD:
        return blocks.head_mcore_to_hf(card, mcore, FINAL_NORM)
    hp, mp = _prefixes(unit)
    out = blocks.attention_mcore_to_hf(card, mcore, f"{mp}self_attention.", f"{hp}self_attn.",
                                       f"{hp}input_layernorm.weight")
    out[f"{hp}post_attention_layernorm.weight"] = blocks.take(mcore, f"{mp}pre_mlp_layernorm.weight")
    out.update(blocks.moe_mcore_to_hf(card, mcore, f"{mp}mlp.", f"{hp}mlp.", fused_experts))
    return out


def unit_shapes(card: ModelCard, unit: Unit) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) names and shapes of one unit; HF experts per expert."""
    if unit == EMBEDDING:
        return blocks.embedding_shapes(card)
    if unit == HEAD:
        return blocks.head_shapes(card, FINAL_NORM)
    hp, mp = _prefixes(unit)
    hf, mcore = blocks.attention_shapes(card, f"{hp}self_attn.", f"{mp}self_attention.")
    hf[f"{hp}input_layernorm.weight"] = (card.hidden_size,)
    hf[f"{hp}post_attention_layernorm.weight"] = mcore[f"{mp}pre_mlp_layernorm.weight"] = (card.hidden_size,)
    moe_hf, moe_mcore = blocks.moe_shapes(card, f"{hp}mlp.", f"{mp}mlp.")
    return hf | moe_hf, mcore | moe_mcore


def hf_to_mcore(card: ModelCard, hf_tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The megatron ``GPTModel`` state dict (TP=PP=EP=1 names, no ``_extra_state``) of HF ``Qwen3MoeForCausalLM``
    tensors (fused or per-expert experts)."""
    return family.hf_to_mcore(card, hf_tensors)


def mcore_to_hf(card: ModelCard, mcore_tensors: Mapping[str, Tensor], fused_experts: bool = False) -> dict[str, Tensor]:
    """HF tensors from a megatron ``GPTModel`` state dict: ``save_pretrained`` names (per-expert), or the
    transformers 5.x in-memory names (``experts.gate_up_proj`` / ``down_proj``) with ``fused_experts``."""
    return family.mcore_to_hf(card, mcore_tensors, fused_experts)
