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


def layer_prefixes(layer: int) -> tuple[str, str, str]:
    """HF prefix, megatron mixer prefix and megatron MoE prefix of HF layer ``layer`` (one megatron layer)."""
    return f"model.layers.{layer}.", f"decoder.layers.{layer}.", f"decoder.layers.{layer}."


def mixer_hf_to_mcore(card: ModelCard, layer: int, hf: Mapping[str, Tensor], hp: str, mc: str) -> dict[str, Tensor]:
    """Attention and its input norm of HF layer ``layer`` -> megatron ``SelfAttention`` tensors under ``mc``."""
    return blocks.attention_hf_to_mcore(card, hf, f"{hp}self_attn.", f"{hp}input_layernorm.weight", mc)


def mixer_mcore_to_hf(card: ModelCard, layer: int, mcore: Mapping[str, Tensor], mc: str, hp: str) -> dict[str, Tensor]:
    """Inverse of :func:`mixer_hf_to_mcore`."""
    return blocks.attention_mcore_to_hf(card, mcore, mc, f"{hp}self_attn.", f"{hp}input_layernorm.weight")


def mixer_shapes(card: ModelCard, layer: int, hp: str, mc: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) shapes of the attention and its input norm."""
    hf, mcore = blocks.attention_shapes(card, f"{hp}self_attn.", mc)
    hf[f"{hp}input_layernorm.weight"] = (card.hidden_size,)
    return hf, mcore


def hf_to_mcore(card: ModelCard, hf_tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The megatron ``GPTModel`` state dict (TP=PP=EP=1 names, no ``_extra_state``) of HF ``Qwen3MoeForCausalLM``
    tensors (fused or per-expert experts)."""
    return family.hf_to_mcore(card, hf_tensors)


def mcore_to_hf(card: ModelCard, mcore_tensors: Mapping[str, Tensor], fused_experts: bool = False) -> dict[str, Tensor]:
    """HF tensors from a megatron ``GPTModel`` state dict: ``save_pretrained`` names (per-expert), or the
    transformers 5.x in-memory names (``experts.gate_up_proj`` / ``down_proj``) with ``fused_experts``."""
    return family.mcore_to_hf(card, mcore_tensors, fused_experts)
