"""Parameter counts from the cards against transformers' own models built on the meta device."""

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.family import family_module
from megatron.oellm.params import parameter_counts

transformers = pytest.importorskip("transformers")

def _hf_meta_model(card):
    config = family_module(card).hf_config_from_card(card)
    with torch.device("meta"):
        return getattr(transformers, card.hf_architecture)(config)


def _is_routed_expert(name: str) -> bool:
    return ".mlp.experts." in name


@pytest.mark.parametrize("name", [
    "qwen3.5-35b-a3b", "qwen3-30b-a3b", "qwen3-235b-a22b",
    "qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-proxy-4L"])
def test_total_and_active_match_transformers(name):
    card = get_card(name)
    model = _hf_meta_model(card)
    hf_total = sum(p.numel() for p in model.parameters())
    hf_routed = sum(p.numel() for n, p in model.named_parameters() if _is_routed_expert(n))
    hf_active = hf_total - hf_routed + hf_routed * card.moe_router_topk // card.num_experts
    ours = parameter_counts(card)
    assert hf_routed > 0
    # exact: a 1e-3 tolerance let the whole router of the full-size cards (21M of 35B) or every shared-expert gate and
    # QK / GDN output norm of the tiny ones go missing unnoticed
    assert ours.total == hf_total
    assert ours.active == hf_active
    assert ours.routed_experts == hf_routed


def test_published_sizes_are_what_the_names_say():
    assert round(parameter_counts(get_card("qwen3.5-35b-a3b")).total / 1e9) == 35
    assert round(parameter_counts(get_card("qwen3-30b-a3b")).total / 1e9) == 31
    assert round(parameter_counts(get_card("qwen3-235b-a22b")).total / 1e9) == 235
    assert round(parameter_counts(get_card("qwen3-235b-a22b")).active / 1e9) == 22


def test_ckda_projection_parameters_are_what_the_flop_count_multiplies():
    """A linear layer does one multiply-add per weight per token: the CKDA projections of the parameter count and of
    the FLOP count must agree, also with grouped values (more value than key heads)."""
    import dataclasses

    from megatron.oellm.flops import forward_flops_per_token
    from megatron.oellm.params import ckda_layer_params

    card = dataclasses.replace(get_card("oellm-ckda-hybrid-tiny"), linear_num_value_heads=4, linear_num_key_heads=2)
    flops = forward_flops_per_token(card, 64)
    per_layer_macs = sum(v for k, v in flops.items() if k.startswith("ckda_") and k != "ckda_delta_rule")
    per_layer_macs /= 2 * card.num_linear_layers
    heads, value_dim = card.linear_num_value_heads, card.linear_value_head_dim
    non_matmul = 2 * heads + value_dim  # A_log, dt bias, output norm: no multiply-add per token
    assert per_layer_macs == ckda_layer_params(card) - non_matmul


def test_ckda_layer_parameters_by_hand_with_value_heads_wider_than_key_heads():
    """Hand count of one CKDA mixer with key head dim 16 and value head dim 24 (so that a gate sized by the value width
    instead of value heads x key head dim shows): hidden 64, 2 key / 4 value heads, low rank 8, conv kernel 4."""
    import dataclasses

    from megatron.oellm.params import ckda_layer_params, tp_replicated_layer_params

    card = dataclasses.replace(get_card("oellm-ckda-hybrid-tiny"), linear_num_key_heads=2, linear_num_value_heads=4,
                               linear_key_head_dim=16, linear_value_head_dim=24, linear_gate_low_rank_dim=8)
    expected = (64 * (32 + 32 + 96)  # q, k (2 x 16), v (4 x 24)
                + 160 * 4  # depthwise conv on q, k, v
                + 64 * 4  # beta, one per value head
                + 64 * 8 + 8 * (4 * 16)  # decay gate: hidden -> rank -> value heads x key head dim
                + 64 * 8 + 8 * 96  # output gate: hidden -> rank -> value width
                + 2 * 4 + 24  # A_log and dt bias per value head, output norm over one value head
                + 96 * 64)  # output projection
    assert ckda_layer_params(card) == expected == 19616
    # whole on every TP rank: 2 layer norms, router 8 x 64, shared-expert gate 64, and the output norm / QK norms
    assert tp_replicated_layer_params(card, "ckda") == 2 * 64 + 8 * 64 + 64 + 24
    assert tp_replicated_layer_params(card, "attention") == 2 * 64 + 8 * 64 + 64 + 2 * 32


def test_format_count_switches_unit_at_exactly_one_thousand_of_the_smaller():
    from megatron.oellm.params import format_count

    assert [format_count(n) for n in (999, 1000, 10**6, 10**9, 34_660_000_000, 10**12)] == [
        "999", "1.00K", "1.00M", "1.00B", "34.66B", "1.00T"]
