"""Review of the model-specific conversion: HF ``config.json`` fields from which transformers derives a value the
card fixes (layer types, head size), the top-level fields of a multimodal config, and the converted megatron
tensors checked against what the HF model computes (float64, fresh random weights)."""

from __future__ import annotations

import json

import pytest
import torch
from convert_helpers import random_hf_tensors

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module, hf_to_mcore
from megatron.oellm.convert.hf_config import check_hf_config, text_model_config

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"
PRODUCT_TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}
"""Float64 products of the same rows through differently shaped matrices (a fused projection against its HF parts):
the BLAS kernel, picked by shape and CPU, may round the last bits differently (seen: 7e-15); a row taken from the
wrong place differs by O(1)."""


def _card_config(name: str) -> dict:
    """The ``config.json`` fields transformers writes for card ``name``."""
    card = get_card(name)
    return json.loads(family_module(card).hf_config_from_card(card).to_json_string())


def _check(name: str, config: dict) -> None:
    check_hf_config(get_card(name), json.dumps(config), "config.json")


def test_layer_types_derived_from_a_stated_full_attention_interval_are_compared() -> None:
    """Without ``layer_types`` transformers derives them from ``full_attention_interval``: an interval of 2 makes
    layer 1 an attention layer, which the card's ``GGG*`` pattern does not have."""
    config = _card_config(QWEN35)
    del config["layer_types"]
    config["full_attention_interval"] = 2
    with pytest.raises(ConversionError, match=r"layer_types: checkpoint \['linear_attention', 'full_attention'"):
        _check(QWEN35, config)


def test_layer_types_derived_as_the_card_has_them_are_accepted() -> None:
    config = _card_config(QWEN35)
    del config["layer_types"]
    config["full_attention_interval"] = 4
    _check(QWEN35, config)


def test_head_dim_derived_from_the_stated_width_is_compared() -> None:
    """Qwen3-MoE's attention uses ``hidden_size // num_attention_heads`` (16 here) without ``head_dim``; the card's
    heads are 32 wide."""
    config = _card_config(QWEN3)
    del config["head_dim"]
    with pytest.raises(ConversionError, match=r"head_dim: checkpoint 16, card 32"):
        _check(QWEN3, config)


def test_head_dim_stated_as_the_card_has_it_is_accepted() -> None:
    _check(QWEN3, _card_config(QWEN3))


def test_top_level_tie_word_embeddings_of_a_multimodal_config_is_compared() -> None:
    """The export's text config takes ``tie_word_embeddings`` from the multimodal top level when ``text_config``
    lacks it; tied, transformers would drop the converted ``lm_head`` for the embedding."""
    text = _card_config(QWEN35)
    del text["tie_word_embeddings"]
    config = {"model_type": "qwen3_5_moe", "tie_word_embeddings": True, "text_config": text}
    assert json.loads(text_model_config(get_card(QWEN35), json.dumps(config)))["tie_word_embeddings"] is True
    with pytest.raises(ConversionError, match=r"tie_word_embeddings: checkpoint True, card False"):
        _check(QWEN35, config)


def test_text_config_field_wins_over_the_top_level_one() -> None:
    text = _card_config(QWEN35)
    config = {"model_type": "qwen3_5_moe", "tie_word_embeddings": True, "text_config": text}
    assert json.loads(text_model_config(get_card(QWEN35), json.dumps(config)))["tie_word_embeddings"] is False
    _check(QWEN35, config)


def _random_float64(name: str, seed: int) -> tuple[object, dict, dict]:
    """Card, HF tensors (float64, fresh random values) and their megatron conversion."""
    card = get_card(name)
    hf = {k: v.double() for k, v in random_hf_tensors(card, seed=seed).items()}
    return card, hf, hf_to_mcore(card, hf)


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_attention_projections_agree_with_hf(name: str) -> None:
    """Per head: HF's query (and, gated, its gate: ``q_proj`` rows ``[query; gate]`` per head), key and value against
    megatron's per-group split of ``linear_qkv`` (``[queries; gates; key; value]``)."""
    seed = int(torch.randint(0, 2**31, ()))
    card, hf, mcore = _random_float64(name, seed)
    layer = card.mixer_types.index("attention")
    hp, mixer, _ = family_module(card).layer_prefixes(layer)
    x = torch.randn(5, card.hidden_size, dtype=torch.float64)
    heads, groups, hd = card.num_attention_heads, card.num_query_groups, card.kv_channels
    per_head = 2 if card.attention_output_gate else 1
    hf_q = (x @ hf[f"{hp}self_attn.q_proj.weight"].T).view(5, heads, per_head, hd)
    hf_k = (x @ hf[f"{hp}self_attn.k_proj.weight"].T).view(5, groups, hd)
    hf_v = (x @ hf[f"{hp}self_attn.v_proj.weight"].T).view(5, groups, hd)
    mixed = (x @ mcore[f"{mixer}self_attention.linear_qkv.weight"].T).view(5, groups, -1)
    sections = [heads // groups * hd] * per_head + [hd, hd]
    parts = torch.split(mixed, sections, dim=-1)
    torch.testing.assert_close(parts[0].reshape(5, heads, hd), hf_q[:, :, 0], **PRODUCT_TOLERANCE)
    if card.attention_output_gate:
        torch.testing.assert_close(parts[1].reshape(5, heads, hd), hf_q[:, :, 1], **PRODUCT_TOLERANCE)
    torch.testing.assert_close(parts[-2], hf_k, **PRODUCT_TOLERANCE)
    torch.testing.assert_close(parts[-1], hf_v, **PRODUCT_TOLERANCE)


def test_gdn_projections_and_norm_agree_with_hf() -> None:
    """megatron's ``in_proj`` split ``[q, k, v, z, beta, alpha]`` against HF's four projections, and the gated
    output norm's effective weight (megatron zero-centred: ``1 + w``) against HF's plain ``w``."""
    card, hf, mcore = _random_float64(QWEN35, int(torch.randint(0, 2**31, ())))
    hp, mixer, _ = family_module(card).layer_prefixes(card.mixer_types.index("gdn"))
    la, sa = f"{hp}linear_attn.", f"{mixer}self_attention."
    x = torch.randn(5, card.hidden_size, dtype=torch.float64)
    key, value, heads = card.linear_key_width, card.linear_value_width, card.linear_num_value_heads
    q, k, v, z, b, a = torch.split(x @ mcore[f"{sa}in_proj.weight"].T, [key, key, value, value, heads, heads], -1)
    torch.testing.assert_close(torch.cat([q, k, v], -1), x @ hf[f"{la}in_proj_qkv.weight"].T, **PRODUCT_TOLERANCE)
    for mine, theirs in ((z, "in_proj_z"), (b, "in_proj_b"), (a, "in_proj_a")):
        torch.testing.assert_close(mine, x @ hf[f"{la}{theirs}.weight"].T, **PRODUCT_TOLERANCE)
    torch.testing.assert_close(1 + mcore[f"{sa}out_norm.weight"], hf[f"{la}norm.weight"])
    for name in ("conv1d.weight", "A_log", "dt_bias", "out_proj.weight"):
        assert torch.equal(mcore[f"{sa}{name}"], hf[f"{la}{name}"]), name
