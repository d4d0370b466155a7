"""Qwen3.5-MoE map against megatron-core's layout rules (gated attention, Gated DeltaNet, hybrid numbering)."""

from __future__ import annotations

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.blocks import shift_norm
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.models.qwen3_5 import convert
from tests.unit_tests.convert.convert_helpers import random_hf_tensors

CARD = get_card("qwen3.5-35b-a3b-tiny")


def test_hybrid_numbering_puts_mixer_at_2i_and_moe_at_2i_plus_1() -> None:
    mcore = convert.hf_to_mcore(CARD, random_hf_tensors(CARD))
    for j, symbol in enumerate(CARD.hybrid_layer_pattern):
        names = [n for n in mcore if n.startswith(f"decoder.layers.{j}.")]
        kinds = {"G": "self_attention.in_proj.weight", "*": "self_attention.linear_qkv.weight",
                 "E": "mlp.router.weight"}
        assert f"decoder.layers.{j}.{kinds[symbol]}" in names


def test_gated_linear_qkv_matches_hf_query_and_gate() -> None:
    hf = random_hf_tensors(CARD, dtype=torch.float64)
    layer = CARD.mixer_types.index("attention")
    mcore = convert.hf_to_mcore(CARD, hf)
    groups, heads, hd = CARD.num_query_groups, CARD.num_attention_heads, CARD.kv_channels
    x = torch.randn(4, CARD.hidden_size, dtype=torch.float64)
    out = (x @ mcore[f"decoder.layers.{2 * layer}.self_attention.linear_qkv.weight"].T).view(4, groups, -1)
    per_group = heads // groups * hd
    query, gate, key, value = torch.split(out, [per_group, per_group, hd, hd], dim=-1)
    p = f"model.layers.{layer}.self_attn."
    hf_query, hf_gate = torch.chunk((x @ hf[f"{p}q_proj.weight"].T).view(4, heads, 2 * hd), 2, dim=-1)
    torch.testing.assert_close(query.reshape(4, heads, hd), hf_query)
    torch.testing.assert_close(gate.reshape(4, -1), hf_gate.reshape(4, -1))
    torch.testing.assert_close(key.reshape(4, -1), x @ hf[f"{p}k_proj.weight"].T)
    torch.testing.assert_close(value.reshape(4, -1), x @ hf[f"{p}v_proj.weight"].T)


def test_gdn_in_proj_sections_follow_megatron_order() -> None:
    hf = random_hf_tensors(CARD, dtype=torch.float64)
    mcore = convert.hf_to_mcore(CARD, hf)
    qk = CARD.linear_num_key_heads * CARD.linear_key_head_dim
    v = CARD.linear_num_value_heads * CARD.linear_value_head_dim
    nv = CARD.linear_num_value_heads
    x = torch.randn(3, CARD.hidden_size, dtype=torch.float64)
    q, k, val, z, beta, alpha = torch.split(x @ mcore["decoder.layers.0.self_attention.in_proj.weight"].T,
                                            [qk, qk, v, v, nv, nv], dim=-1)
    p = "model.layers.0.linear_attn."
    hf_q, hf_k, hf_v = torch.split(x @ hf[f"{p}in_proj_qkv.weight"].T, [qk, qk, v], dim=-1)
    for actual, expected in [(q, hf_q), (k, hf_k), (val, hf_v), (z, x @ hf[f"{p}in_proj_z.weight"].T),
                             (beta, x @ hf[f"{p}in_proj_b.weight"].T), (alpha, x @ hf[f"{p}in_proj_a.weight"].T)]:
        torch.testing.assert_close(actual, expected)
    assert torch.equal(mcore["decoder.layers.0.self_attention.conv1d.weight"], hf[f"{p}conv1d.weight"])


def test_norm_conventions() -> None:
    hf = random_hf_tensors(CARD, dtype=torch.float32)
    mcore = convert.hf_to_mcore(CARD, hf)
    # zero-centred on both sides: same stored weight
    assert torch.equal(mcore["decoder.layers.0.self_attention.in_proj.layer_norm_weight"],
                       hf["model.layers.0.input_layernorm.weight"])
    assert torch.equal(mcore["decoder.layers.1.pre_mlp_layernorm.weight"],
                       hf["model.layers.0.post_attention_layernorm.weight"])
    layer = CARD.mixer_types.index("attention")
    assert torch.equal(mcore[f"decoder.layers.{2 * layer}.self_attention.q_layernorm.weight"],
                       hf[f"model.layers.{layer}.self_attn.q_norm.weight"])
    assert torch.equal(mcore["decoder.final_norm.weight"], hf["model.norm.weight"])
    # GDN gated norm: HF applies w, megatron (zero-centred) applies 1 + w_mcore
    torch.testing.assert_close(1 + mcore["decoder.layers.0.self_attention.out_norm.weight"],
                               hf["model.layers.0.linear_attn.norm.weight"], rtol=0, atol=1e-7)


def test_inexact_norm_shift_warns() -> None:
    with pytest.warns(UserWarning, match="out_norm"):
        shift_norm(torch.tensor([1e-3, 1.0], dtype=torch.bfloat16), -1.0, "x.out_norm.weight")


def test_published_names_with_language_model_prefix_are_accepted() -> None:
    from megatron.oellm.convert.hf_names import canonical_hf_names

    hf = random_hf_tensors(CARD)
    published = {n.replace("model.", "model.language_model.", 1) if n.startswith("model.") else n: t
                 for n, t in hf.items()}
    published["model.visual.blocks.0.attn.qkv.weight"] = torch.zeros(1)
    published["mtp.fc.weight"] = torch.zeros(1)
    names, skipped = canonical_hf_names(published)
    assert sorted(names) == sorted(hf)
    assert sorted(skipped) == ["model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight"]


def test_gdn_projections_of_mixed_dtypes_name_the_odd_one() -> None:
    """megatron fuses the four GDN input projections into ``in_proj``; ``torch.cat`` would promote a lone float32
    one and the way back would return the others in float32."""
    hf = random_hf_tensors(CARD)
    odd = "model.layers.0.linear_attn.in_proj_z.weight"
    hf[odd] = hf[odd].float()
    qkv = r"'model\.layers\.0\.linear_attn\.in_proj_qkv\.weight' \(torch\.bfloat16\)"
    with pytest.raises(ConversionError, match=rf"tensor '{odd}' is torch\.float32 but megatron fuses it with {qkv}"):
        convert.hf_to_mcore(CARD, hf)


def test_shared_expert_fc1_is_gate_then_up_as_megatron_swiglu_expects() -> None:
    """megatron's ``SharedExpertMLP`` computes ``silu(first half of fc1) * second half`` (``mlp.glu``), then
    ``sigmoid(x @ gate_weight.T)`` times its output; transformers' shared expert ``down(silu(gate(x)) * up(x))`` times
    ``sigmoid(shared_expert_gate(x))``. A ``[up; gate]`` fc1 in both directions passed the round trips and the load
    into megatron: the expectation here is transformers' own modules, fresh random float64 weights and inputs."""
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hf_modeling

    seed = int(torch.randint(0, 2**31, ()))
    hf = random_hf_tensors(CARD, dtype=torch.float64, seed=seed)
    mcore = convert.hf_to_mcore(CARD, hf)
    config = convert.hf_config_from_card(CARD)
    x = torch.randn(5, CARD.hidden_size, dtype=torch.float64)
    for layer in range(CARD.num_layers):
        p, m = f"model.layers.{layer}.mlp.", f"decoder.layers.{2 * layer + 1}.mlp.shared_experts."
        expert = hf_modeling.Qwen3_5MoeMLP(config, intermediate_size=CARD.moe_shared_expert_intermediate_size)
        expert.load_state_dict({k: hf[f"{p}shared_expert.{k}"] for k in expert.state_dict()})
        gate = torch.nn.Linear(CARD.hidden_size, 1, bias=False)
        gate.load_state_dict({"weight": hf[f"{p}shared_expert_gate.weight"]})
        with torch.no_grad():
            expected = torch.sigmoid(gate.double()(x)) * expert.double()(x)
        first, second = torch.chunk(x @ mcore[f"{m}linear_fc1.weight"].T, 2, dim=-1)
        actual = (torch.sigmoid(x @ mcore[f"{m}gate_weight"].T)
                  * ((torch.nn.functional.silu(first) * second) @ mcore[f"{m}linear_fc2.weight"].T))
        torch.testing.assert_close(actual, expected, msg=f"layer {layer}, seed {seed}")
