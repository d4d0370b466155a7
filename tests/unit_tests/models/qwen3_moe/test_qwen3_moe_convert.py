"""Qwen3-MoE map against megatron-core's layout rules, re-derived here from first principles."""

from __future__ import annotations

import torch

from megatron.oellm.cards import get_card
from megatron.oellm.models.qwen3_moe import convert
from tests.unit_tests.convert.convert_helpers import random_hf_tensors


def _megatron_qkv(qkv_out: torch.Tensor, groups: int, heads: int, hd: int):
    """megatron SelfAttention's split of ``linear_qkv`` output: per group ``[queries, key, value]``."""
    per_group = heads // groups
    grouped = qkv_out.view(*qkv_out.shape[:-1], groups, (per_group + 2) * hd)
    query, key, value = torch.split(grouped, [per_group * hd, hd, hd], dim=-1)
    return query.reshape(*qkv_out.shape[:-1], heads, hd), key, value


def test_linear_qkv_gives_hf_query_key_value_per_head() -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    hf = random_hf_tensors(card, dtype=torch.float64)
    mcore = convert.hf_to_mcore(card, hf)
    x = torch.randn(5, card.hidden_size, dtype=torch.float64)
    query, key, value = _megatron_qkv(x @ mcore["decoder.layers.0.self_attention.linear_qkv.weight"].T,
                                      card.num_query_groups, card.num_attention_heads, card.kv_channels)
    p = "model.layers.0.self_attn."
    torch.testing.assert_close(query, (x @ hf[f"{p}q_proj.weight"].T).view(5, -1, card.kv_channels))
    torch.testing.assert_close(key, (x @ hf[f"{p}k_proj.weight"].T).view(5, -1, card.kv_channels))
    torch.testing.assert_close(value, (x @ hf[f"{p}v_proj.weight"].T).view(5, -1, card.kv_channels))


def test_expert_fc1_is_gate_then_up_as_megatron_swiglu_expects() -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    hf = random_hf_tensors(card, dtype=torch.float64)
    mcore = convert.hf_to_mcore(card, hf)
    x = torch.randn(3, card.hidden_size, dtype=torch.float64)
    for e in (0, card.num_experts - 1):
        p = f"model.layers.1.mlp.experts.{e}."
        expected = (torch.nn.functional.silu(x @ hf[f"{p}gate_proj.weight"].T) * (x @ hf[f"{p}up_proj.weight"].T)
                    ) @ hf[f"{p}down_proj.weight"].T
        first, second = torch.chunk(x @ mcore[f"decoder.layers.1.mlp.experts.linear_fc1.weight{e}"].T, 2, dim=-1)
        actual = (torch.nn.functional.silu(first) * second) @ mcore[f"decoder.layers.1.mlp.experts.linear_fc2.weight{e}"].T
        torch.testing.assert_close(actual, expected)


def test_norms_are_copied_unchanged() -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    hf = random_hf_tensors(card)
    mcore = convert.hf_to_mcore(card, hf)
    assert torch.equal(mcore["decoder.layers.1.self_attention.linear_qkv.layer_norm_weight"],
                       hf["model.layers.1.input_layernorm.weight"])
    assert torch.equal(mcore["decoder.final_layernorm.weight"], hf["model.norm.weight"])
