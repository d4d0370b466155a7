"""``oellm bench --ours-config`` shape fields are checked against the model card before any GPU work: a value the
card's validation refuses, or a weight shape other than the card's (our sides load transformers' weights of it)."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.bench.harness import BenchConfig

MODEL = "qwen3.5-35b-a3b-proxy-4L"


def _refused(overrides: dict) -> str:
    with pytest.raises(ValueError) as refused:
        BenchConfig(model=MODEL, sides=("ours",), ours_overrides=overrides)
    return str(refused.value)


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "kv_channels", "num_moe_experts",
                                   "moe_ffn_hidden_size", "linear_num_value_heads"])
def test_non_positive_shape_value_is_refused_by_the_card_check(field):
    value = random.choice([0, -random.randint(1, 4096)])
    message = _refused({field: value})
    # a negative linear-attention head count reads "must be 0 (none) or positive" (0 means no linear mixer)
    assert f"--ours-config {field}={value}" in message
    assert "must be positive" in message or "must be 0 (none) or positive" in message


def test_heads_not_a_multiple_of_the_query_groups_are_refused():
    heads = random.choice([h for h in range(3, 64) if h % 2])  # the card has 2 query groups
    message = _refused({"num_attention_heads": heads})
    assert f"num_attention_heads ({heads}) must be a multiple of num_query_groups (2)" in message


def test_top_k_above_the_experts_is_refused():
    topk = random.randint(257, 1024)  # the card has 256 experts
    assert f"moe_router_topk ({topk}) exceeds num_experts (256)" in _refused({"moe_router_topk": topk})


@pytest.mark.parametrize("field", ["hidden_size", "num_moe_experts", "num_layers", "kv_channels"])
def test_a_valid_but_different_weight_shape_is_refused(field):
    # divisors of the card's values keep the card valid; the proxy has 2048 wide, 256 experts, 8 hybrid layers
    value = {"hidden_size": random.choice([512, 1024, 4096]), "num_moe_experts": random.choice([16, 32, 128]),
             "num_layers": random.choice([2, 4, 12]), "kv_channels": random.choice([64, 128, 512])}[field]
    message = _refused({field: value})
    assert f"--ours-config {field}={value}" in message and "another shape" in message


def test_the_cards_own_values_and_router_settings_still_pass():
    topk = random.randint(1, 256)
    config = BenchConfig(model=MODEL, sides=("ours",),
                         ours_overrides={"hidden_size": 2048, "num_layers": 8, "moe_router_topk": topk})
    assert config.ours_overrides["moe_router_topk"] == topk
