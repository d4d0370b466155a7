"""Qwen3.5-MoE (text part) checkpoint maps: Hugging Face ``Qwen3_5MoeForCausalLM`` <-> megatron-core
``HybridModel`` (``hybrid_stack_spec``, TE).

megatron numbers mixers and MoE blocks as separate layers (pattern ``card.hybrid_layer_pattern``, e.g. ``GEGEGE*E``):
HF decoder layer ``i`` is megatron layer ``2i`` (Gated DeltaNet ``G`` or attention ``*``, both a ``TransformerLayer``
whose ``self_attention`` carries the input norm fused into its first projection) and layer ``2i+1``
(``MoETransformerLayer``: ``pre_mlp_layernorm`` + ``mlp``).

Norms: HF ``Qwen3_5MoeRMSNorm`` computes ``(1 + w) * x`` (input / post-attention / q / k / final norms) and megatron
with ``layernorm_zero_centered_gamma`` (= ``card.zero_centered_norm``) computes the same from the same ``w``: copied.
HF's gated GDN output norm ``Qwen3_5MoeRMSNormGated`` computes ``w * x`` while megatron's ``out_norm`` (a ``TENorm``
built from the same config) is zero-centred too: megatron stores ``w - 1``. See README.md here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import blocks, family

if TYPE_CHECKING:
    from transformers import Qwen3_5MoeTextConfig

MCORE_MODEL = "hybrid"
FINAL_NORM = "decoder.final_norm.weight"
GDN_IN_PROJ = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
"""HF GDN input projections in the row order of megatron's fused ``in_proj`` (q, k, v | z | beta | alpha)."""


def hf_config_from_card(card: ModelCard) -> Qwen3_5MoeTextConfig:
    """The transformers ``Qwen3_5MoeTextConfig`` describing ``card`` (text model only)."""
    from transformers import Qwen3_5MoeTextConfig

    layer_types = ["full_attention" if m == "attention" else "linear_attention" for m in card.mixer_types]
    return Qwen3_5MoeTextConfig(
        vocab_size=card.vocab_size, hidden_size=card.hidden_size, num_hidden_layers=card.num_layers,
        num_attention_heads=card.num_attention_heads, num_key_value_heads=card.num_query_groups,
        head_dim=card.kv_channels, linear_conv_kernel_dim=card.linear_conv_kernel_dim,
        linear_key_head_dim=card.linear_key_head_dim, linear_value_head_dim=card.linear_value_head_dim,
        linear_num_key_heads=card.linear_num_key_heads, linear_num_value_heads=card.linear_num_value_heads,
        moe_intermediate_size=card.moe_ffn_hidden_size,
        shared_expert_intermediate_size=card.moe_shared_expert_intermediate_size,
        num_experts_per_tok=card.moe_router_topk, num_experts=card.num_experts, layer_types=layer_types,
        rms_norm_eps=card.norm_epsilon, max_position_embeddings=card.max_position_embeddings,
        tie_word_embeddings=not card.untie_embeddings, router_aux_loss_coef=card.moe_aux_loss_coeff,
        rope_parameters={"rope_type": "default", "rope_theta": card.rotary_base,
                         "partial_rotary_factor": card.rotary_percent},
        architectures=[card.hf_architecture or "Qwen3_5MoeForCausalLM"],
    )


def _out_norm_shift(card: ModelCard) -> float:
    """megatron ``out_norm`` weight minus HF ``linear_attn.norm`` weight."""
    return -1.0 if card.zero_centered_norm else 0.0


def _gdn_sizes(card: ModelCard) -> dict[str, int]:
    key, value = card.linear_key_width, card.linear_value_width
    heads = card.linear_num_value_heads
    return {"in_proj_qkv": 2 * key + value, "in_proj_z": value, "in_proj_b": heads, "in_proj_a": heads}


def layer_prefixes(layer: int) -> tuple[str, str, str]:
    """HF prefix, megatron mixer prefix (layer ``2i``) and megatron MoE prefix (layer ``2i+1``) of HF layer ``i``."""
    return f"model.layers.{layer}.", f"decoder.layers.{2 * layer}.", f"decoder.layers.{2 * layer + 1}."


def _gdn_hf_to_mcore(card: ModelCard, hf: Mapping[str, Tensor], hp: str, mc: str) -> dict[str, Tensor]:
    la = f"{hp}linear_attn."
    return {
        f"{mc}in_proj.weight": torch.cat(blocks.take_fused(hf, [f"{la}{name}.weight" for name in GDN_IN_PROJ])),
        f"{mc}in_proj.layer_norm_weight": blocks.take(hf, f"{hp}input_layernorm.weight"),
        f"{mc}conv1d.weight": blocks.take(hf, f"{la}conv1d.weight"),
        f"{mc}A_log": blocks.take(hf, f"{la}A_log"),
        f"{mc}dt_bias": blocks.take(hf, f"{la}dt_bias"),
        f"{mc}out_norm.weight": blocks.shift_norm(blocks.take(hf, f"{la}norm.weight"), _out_norm_shift(card),
                                                  f"{la}norm.weight"),
        f"{mc}out_proj.weight": blocks.take(hf, f"{la}out_proj.weight"),
    }


def _gdn_mcore_to_hf(card: ModelCard, mcore: Mapping[str, Tensor], mc: str, hp: str) -> dict[str, Tensor]:
    la = f"{hp}linear_attn."
    sizes = _gdn_sizes(card)
    parts = torch.split(blocks.take(mcore, f"{mc}in_proj.weight"), [sizes[n] for n in GDN_IN_PROJ])
    out = {f"{la}{name}.weight": part for name, part in zip(GDN_IN_PROJ, parts, strict=True)}
    out.update({
        f"{hp}input_layernorm.weight": blocks.take(mcore, f"{mc}in_proj.layer_norm_weight"),
        f"{la}conv1d.weight": blocks.take(mcore, f"{mc}conv1d.weight"),
        f"{la}A_log": blocks.take(mcore, f"{mc}A_log"),
        f"{la}dt_bias": blocks.take(mcore, f"{mc}dt_bias"),
        f"{la}norm.weight": blocks.shift_norm(blocks.take(mcore, f"{mc}out_norm.weight"), -_out_norm_shift(card),
                                              f"{mc}out_norm.weight"),
        f"{la}out_proj.weight": blocks.take(mcore, f"{mc}out_proj.weight"),
    })
    return out


def _gdn_shapes(card: ModelCard, hp: str, mc: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    la, hidden, sizes = f"{hp}linear_attn.", card.hidden_size, _gdn_sizes(card)
    heads, value = card.linear_num_value_heads, card.linear_value_width
    conv = (sizes["in_proj_qkv"], 1, card.linear_conv_kernel_dim)
    hf = {f"{la}{name}.weight": (size, hidden) for name, size in sizes.items()}
    hf.update({f"{la}conv1d.weight": conv, f"{la}A_log": (heads,), f"{la}dt_bias": (heads,),
               f"{la}norm.weight": (card.linear_value_head_dim,), f"{la}out_proj.weight": (hidden, value)})
    mcore = {f"{mc}in_proj.weight": (sum(sizes.values()), hidden), f"{mc}in_proj.layer_norm_weight": (hidden,),
             f"{mc}conv1d.weight": conv, f"{mc}A_log": (heads,), f"{mc}dt_bias": (heads,),
             f"{mc}out_norm.weight": (card.linear_value_head_dim,), f"{mc}out_proj.weight": (hidden, value)}
    return hf, mcore


def mixer_hf_to_mcore(card: ModelCard, layer: int, hf: Mapping[str, Tensor], hp: str, mc: str) -> dict[str, Tensor]:
    """Gated attention or Gated DeltaNet, with its input norm, of HF layer ``layer`` -> megatron tensors under ``mc``."""
    if card.mixer_types[layer] == "attention":
        return blocks.attention_hf_to_mcore(card, hf, f"{hp}self_attn.", f"{hp}input_layernorm.weight", mc)
    return _gdn_hf_to_mcore(card, hf, hp, mc)


def mixer_mcore_to_hf(card: ModelCard, layer: int, mcore: Mapping[str, Tensor], mc: str, hp: str) -> dict[str, Tensor]:
    """Inverse of :func:`mixer_hf_to_mcore`."""
    if card.mixer_types[layer] == "attention":
        return blocks.attention_mcore_to_hf(card, mcore, mc, f"{hp}self_attn.", f"{hp}input_layernorm.weight")
    return _gdn_mcore_to_hf(card, mcore, mc, hp)


def mixer_shapes(card: ModelCard, layer: int, hp: str, mc: str) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Expected (HF, megatron) shapes of the mixer of HF layer ``layer`` and its input norm."""
    if card.mixer_types[layer] == "attention":
        hf, mcore = blocks.attention_shapes(card, f"{hp}self_attn.", mc)
    else:
        hf, mcore = _gdn_shapes(card, hp, mc)
    hf[f"{hp}input_layernorm.weight"] = (card.hidden_size,)
    return hf, mcore


def hf_to_mcore(card: ModelCard, hf_tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The megatron ``HybridModel`` state dict (TP=PP=EP=1 names, no ``_extra_state``) of HF
    ``Qwen3_5MoeForCausalLM`` tensors (fused or per-expert experts)."""
    return family.hf_to_mcore(card, hf_tensors)


def mcore_to_hf(card: ModelCard, mcore_tensors: Mapping[str, Tensor], fused_experts: bool = False) -> dict[str, Tensor]:
    """HF tensors from a megatron ``HybridModel`` state dict: ``save_pretrained`` names (per-expert), or the
    transformers 5.x in-memory names (``experts.gate_up_proj`` / ``down_proj``) with ``fused_experts``."""
    return family.mcore_to_hf(card, mcore_tensors, fused_experts)
