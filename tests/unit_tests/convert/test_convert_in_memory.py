"""In-memory HF <-> megatron-core conversion of both Qwen families: round trips, names, shapes, HF models, and the
converted attention / GDN projections checked against what the HF model computes (float64, fresh random weights)."""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.blocks import bitwise_equal
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import expected_shapes, family_module, hf_to_mcore, mcore_to_hf
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, fuse_experts, random_hf_tensors, same_bits

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"
TINY_CARDS = [QWEN35, QWEN3]
PRODUCT_TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}
"""Float64 products of the same rows through differently shaped matrices (a fused projection against its HF parts):
the BLAS kernel, picked by shape and CPU, may round the last bits differently (seen: 7e-15); a row taken from the
wrong place differs by O(1)."""


@pytest.mark.parametrize("name", TINY_CARDS)
def test_round_trip_is_bit_exact(name: str) -> None:
    card = get_card(name)
    hf = random_hf_tensors(card)
    mcore = hf_to_mcore(card, hf)
    assert_bitwise_equal(hf, mcore_to_hf(card, mcore))


@pytest.mark.parametrize("name", TINY_CARDS)
def test_mcore_names_and_shapes_match_the_expected_map(name: str) -> None:
    card = get_card(name)
    mcore = hf_to_mcore(card, random_hf_tensors(card))
    assert {k: tuple(v.shape) for k, v in mcore.items()} == expected_shapes(card)[1]


@pytest.mark.parametrize("name", TINY_CARDS)
def test_fused_experts_read_and_written(name: str) -> None:
    card = get_card(name)
    hf = random_hf_tensors(card, seed=1)
    fused = fuse_experts(card, hf)
    mcore = hf_to_mcore(card, fused)
    assert_bitwise_equal(hf_to_mcore(card, hf), mcore)
    assert_bitwise_equal(fused, mcore_to_hf(card, mcore, fused_experts=True))


@pytest.mark.parametrize("name", TINY_CARDS)
def test_transformers_model_has_exactly_the_expected_hf_tensors(name: str) -> None:
    card = get_card(name)
    module = family_module(card)
    model = getattr(__import__("transformers"), card.hf_architecture)(module.hf_config_from_card(card))
    state = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    expected = {k: tuple(v.shape) for k, v in fuse_experts(card, random_hf_tensors(card)).items()}
    assert state == expected


@pytest.mark.parametrize("name", TINY_CARDS)
def test_missing_tensor_is_named(name: str) -> None:
    card = get_card(name)
    hf = random_hf_tensors(card)
    del hf["model.layers.1.post_attention_layernorm.weight"]
    with pytest.raises(ConversionError, match=r"model\.layers\.1\.post_attention_layernorm\.weight"):
        hf_to_mcore(card, hf)


def test_family_without_converter_is_a_clear_error() -> None:
    with pytest.raises(ConversionError, match="ckda_hybrid"):
        family_module(get_card("oellm-ckda-hybrid-tiny"))


def test_float32_round_trip() -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, dtype=torch.float32, seed=2)
    assert_bitwise_equal(hf, mcore_to_hf(card, hf_to_mcore(card, hf)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.float8_e4m3fn])
def test_both_bitwise_checks_see_one_flipped_bit(dtype: torch.dtype) -> None:
    """The round trips are only as strict as their check: one flipped bit (a fresh random byte and bit), another shape
    or another dtype must be a difference both for the tests' check and for the converter's ``bitwise_equal`` (its
    norm shift relies on it), and an identical copy none."""
    rng = random.Random(random.random())
    tensor = torch.randn(7, 5, generator=torch.Generator().manual_seed(rng.randrange(2**31))).to(dtype)
    flipped = tensor.clone()
    byte = rng.randrange(tensor.numel() * tensor.element_size())
    flipped.reshape(-1).view(torch.uint8)[byte] ^= 1 << rng.randrange(8)
    for check in (same_bits, bitwise_equal):
        assert check(tensor, tensor.clone()), check
        assert not check(tensor, flipped), check
        assert not check(tensor, tensor.view(5, 7)), check
        assert not check(tensor.float(), tensor.double()), check


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
