"""Spec construction on CPU: TransformerConfig from every card and layout, layer specs, hybrid patterns, routing."""

import dataclasses

import pytest
import torch

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models import spec_builder
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError

QWEN35_CARDS = ["qwen3.5-35b-a3b", "qwen3.5-35b-a3b-tiny", "qwen3.5-35b-a3b-proxy-4L"]
QWEN3_CARDS = ["qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-30b-a3b-tiny", "qwen3-30b-a3b-proxy-2L"]

LAYOUTS = {
    "qwen3.5-35b-a3b": [
        ParallelLayout(),
        ParallelLayout(tp=2, sp=True, ep=8),
        ParallelLayout(tp=2, pp=4, vpp=5, ep=16, etp=1, cp=2, sp=True),
        ParallelLayout(pp=4, pipeline_layout="Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L"),
        ParallelLayout(pp=2, ep=64, etp=2, pipeline_layout="Et*19|t*21L"),
    ],
    "qwen3-30b-a3b": [
        ParallelLayout(),
        ParallelLayout(tp=4, sp=True, ep=8, etp=1),
        ParallelLayout(tp=2, pp=4, vpp=3, ep=16, cp=4, sp=True),
        ParallelLayout(pp=4, pipeline_layout="Et*5|t*7|t*6|t*6|t*6|t*6|t*6|t*6L"),
    ],
}


def _tiny_layouts(card) -> list[ParallelLayout]:
    layers = card.num_layers
    return [ParallelLayout(), ParallelLayout(tp=2, sp=True, ep=4, etp=2),
            ParallelLayout(pp=2, pipeline_layout=f"Et*{layers - 1}|tL")]


def _cases():
    for name in QWEN35_CARDS + QWEN3_CARDS:
        card = get_card(name)
        layouts = LAYOUTS.get(name) or _tiny_layouts(card)
        for index, layout in enumerate(layouts):
            yield pytest.param(card, layout, id=f"{name}-{index}")


@pytest.mark.parametrize("card,layout", list(_cases()))
def test_transformer_config_matches_card(card, layout) -> None:
    builder = spec_builder(card.family)
    config = builder.transformer_config(card, layout, params_dtype=torch.float32)
    hybrid = card.family == "qwen3_5"
    assert config.num_layers == card.num_layers * (2 if hybrid else 1)
    assert (config.hidden_size, config.num_attention_heads, config.num_query_groups, config.kv_channels) == (
        card.hidden_size, card.num_attention_heads, card.num_query_groups, card.kv_channels)
    assert config.normalization == "RMSNorm" and config.layernorm_epsilon == card.norm_epsilon
    assert config.layernorm_zero_centered_gamma == card.zero_centered_norm
    assert config.qk_layernorm == card.qk_layernorm and config.attention_output_gate == card.attention_output_gate
    assert config.gated_linear_unit and not config.add_bias_linear
    assert (config.num_moe_experts, config.moe_ffn_hidden_size, config.moe_router_topk) == (
        card.num_experts, card.moe_ffn_hidden_size, card.moe_router_topk)
    assert config.moe_shared_expert_intermediate_size == (card.moe_shared_expert_intermediate_size or None)
    assert config.moe_shared_expert_gate == card.moe_shared_expert_gate
    assert config.moe_router_load_balancing_type == card.moe_router_load_balancing_type
    assert config.moe_grouped_gemm
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.expert_model_parallel_size,
            config.expert_tensor_parallel_size, config.context_parallel_size, config.sequence_parallel) == (
        layout.tp, layout.pp, layout.ep, layout.etp, layout.cp, layout.sp)
    assert (config.virtual_pipeline_model_parallel_size or 1) == layout.vpp_size
    assert config.params_dtype == torch.float32 and not config.bf16
    if hybrid:
        assert config.is_hybrid_model and config.pipeline_model_parallel_layout is None
        assert (config.linear_num_key_heads, config.linear_num_value_heads, config.linear_key_head_dim,
                config.linear_value_head_dim, config.linear_conv_kernel_dim) == (
            card.linear_num_key_heads, card.linear_num_value_heads, card.linear_key_head_dim,
            card.linear_value_head_dim, card.linear_conv_kernel_dim)
    elif layout.pipeline_layout:
        assert str(config.pipeline_model_parallel_layout) == layout.pipeline_layout


@pytest.mark.parametrize("card,layout", [p for p in _cases() if p.values[0].family == "qwen3_5"])
def test_hybrid_pattern_honours_pipeline_stages(card, layout) -> None:
    from megatron.core.models.hybrid.hybrid_layer_allocation import (
        get_hybrid_layer_counts,
        get_hybrid_total_layer_count,
        get_hybrid_total_pipeline_segment_count,
    )

    builder = spec_builder(card.family)
    pattern = builder.hybrid_layer_pattern(card, layout)
    config = builder.transformer_config(card, layout)
    assert pattern.replace("|", "") == card.hybrid_layer_pattern
    assert get_hybrid_total_layer_count(pattern) == config.num_layers
    assert get_hybrid_total_pipeline_segment_count(pattern) == layout.pp * layout.vpp_size
    counts = get_hybrid_layer_counts(pattern)
    assert counts["E"] == card.num_layers
    assert counts["*"] == card.num_attention_layers and counts["G"] == card.num_linear_layers
    segments = pattern.split("|")
    assert [len(s) // 2 for s in segments] == layout.decoder_layers_per_stage(card.num_layers)
    assert all(s[i + 1] == "E" and s[i] in "G*" for s in segments for i in range(0, len(s), 2))


def test_hybrid_pattern_of_the_published_layout() -> None:
    card = get_card("qwen3.5-35b-a3b")
    layout = ParallelLayout(pp=2, pipeline_layout="Et*6|t*6|t*6|t*2|t*6|t*6|t*6|t*2L")
    pattern = spec_builder(card.family).hybrid_layer_pattern(card, layout)
    assert pattern.split("|")[:4] == ["GEGEGE*EGEGE", "GE*EGEGEGE*E", "GEGEGE*EGEGE", "GE*E"]


def _local_provider():
    from megatron.core.models.backends import LocalSpecProvider

    return LocalSpecProvider()


def test_hybrid_stack_spec_structure() -> None:
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_layer import MoETransformerLayer

    card = get_card("qwen3.5-35b-a3b-tiny")
    provider = LocalSpecProvider()
    spec = spec_builder(card.family).hybrid_stack_spec(card, provider)
    norm = provider.layer_norm(rms_norm=True)
    assert spec.params["final_norm"] is norm
    gdn = spec.submodules.gdn_layer.submodules
    assert gdn.input_layernorm is norm  # the local provider fuses no norm into linears
    assert gdn.self_attention.module is GatedDeltaNet
    assert gdn.self_attention.submodules.in_proj is ColumnParallelLinear
    assert gdn.self_attention.submodules.out_proj is RowParallelLinear
    attention = spec.submodules.attention_layer.submodules
    assert attention.self_attention.module is SelfAttention
    assert attention.self_attention.submodules.q_layernorm is norm
    assert attention.self_attention.submodules.k_layernorm is norm
    assert attention.pre_mlp_layernorm is IdentityOp  # attention layers carry no MLP in the hybrid stack
    moe = spec.submodules.moe_layer
    assert moe.module is MoETransformerLayer and moe.submodules.pre_mlp_layernorm is norm
    assert moe.submodules.mlp.func is MoELayer
    assert moe.submodules.mlp.keywords["submodules"].shared_experts is not None


def test_torch_backend_fuses_input_norms() -> None:
    from megatron.core.transformer.identity_op import IdentityOp

    from megatron.oellm.backends import backend_spec_provider

    provider = backend_spec_provider("torch")
    fused = provider.column_parallel_layer_norm_linear()
    card = get_card("qwen3.5-35b-a3b-tiny")
    spec = spec_builder(card.family).hybrid_stack_spec(card, "torch")
    assert spec.submodules.gdn_layer.submodules.input_layernorm is IdentityOp
    assert spec.submodules.gdn_layer.submodules.self_attention.submodules.in_proj is fused
    assert spec.submodules.attention_layer.submodules.self_attention.submodules.linear_qkv is fused
    gpt = spec_builder("qwen3_moe").layer_spec(get_card("qwen3-30b-a3b-tiny"), "torch").submodules
    assert gpt.input_layernorm is IdentityOp and gpt.self_attention.submodules.linear_qkv is fused


def test_gpt_block_spec() -> None:
    from megatron.core.transformer.attention import SelfAttention

    card = get_card("qwen3-30b-a3b")
    provider = _local_provider()
    block = spec_builder(card.family).block_spec(card, 7, provider)
    assert len(block.layer_specs) == 7 and block.layer_norm is provider.layer_norm(rms_norm=True)
    layer = block.layer_specs[0].submodules
    assert layer.self_attention.module is SelfAttention
    assert layer.self_attention.submodules.q_layernorm is provider.layer_norm(rms_norm=True)
    assert layer.pre_mlp_layernorm is provider.layer_norm(rms_norm=True)
    assert layer.mlp.keywords["submodules"].experts is not None


def test_router_mapping_is_softmax_topk_renormalise() -> None:
    """The config's router computes the card's routing: softmax over all experts, top-k, renormalised."""
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    card = get_card("qwen3-30b-a3b-tiny")
    config = spec_builder(card.family).transformer_config(card)
    logits = torch.randn(64, card.num_experts, dtype=torch.float32)
    probs, routing_map = topk_routing_with_score_function(
        logits, card.moe_router_topk, use_pre_softmax=config.moe_router_pre_softmax)
    full = torch.softmax(logits, dim=-1)
    top, index = full.topk(card.moe_router_topk, dim=-1)
    reference = torch.zeros_like(full).scatter(1, index, top / top.sum(-1, keepdim=True))
    assert torch.equal(routing_map, reference > 0)
    torch.testing.assert_close(probs, reference, rtol=1e-6, atol=1e-7)


def test_wrong_family_and_bad_layout_are_rejected() -> None:
    qwen35, qwen3 = get_card("qwen3.5-35b-a3b"), get_card("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="not a qwen3_moe card"):
        spec_builder("qwen3_moe").transformer_config(qwen35)
    with pytest.raises(ValueError, match="not a qwen3_5 card"):
        spec_builder("qwen3_5").hybrid_stack_spec(qwen3, _local_provider())
    with pytest.raises(ParallelLayoutError, match="num_attention_heads"):
        spec_builder("qwen3_5").transformer_config(qwen35, ParallelLayout(tp=32, sp=True))
    with pytest.raises(KeyError, match="known: qwen3_5, qwen3_moe"):
        spec_builder("ckda_hybrid")


def test_a_card_of_the_family_with_another_linear_mixer_is_rejected() -> None:
    """Family and linear mixer are each checked: a card that matches the builder's family but not its mixer (or the
    mixer but not the family) is refused, naming both, and not built with the other layer kind."""
    from megatron.oellm.models.building_blocks import check_family

    qwen35, qwen3 = get_card("qwen3.5-35b-a3b-tiny"), get_card("qwen3-30b-a3b-tiny")
    for card, family, mixer in ((qwen35, "qwen3_5", "none"), (qwen35, "qwen3_moe", "gdn"),
                                (qwen3, "qwen3_moe", "gdn"), (qwen3, "qwen3_5", "none")):
        with pytest.raises(ValueError, match=f"is not a {family} card with linear_mixer={mixer!r} "
                                             f"\\(family={card.family!r}, linear_mixer={card.linear_mixer!r}\\)"):
            check_family(card, family, mixer)
    check_family(qwen35, "qwen3_5", "gdn")
    check_family(qwen3, "qwen3_moe", "none")


def test_config_overrides_win() -> None:
    card = dataclasses.replace(get_card("qwen3-30b-a3b-tiny"), name="t")
    config = spec_builder(card.family).transformer_config(card, moe_aux_loss_coeff=0.0, init_method_std=0.01)
    assert config.moe_aux_loss_coeff == 0.0 and config.init_method_std == 0.01
