"""In-memory HF <-> megatron-core conversion of both Qwen families: round trips, names, shapes, HF models."""

from __future__ import annotations

import random

import pytest
import torch
from convert_helpers import assert_bitwise_equal, fuse_experts, random_hf_tensors, same_bits

from megatron.oellm.cards import get_card
from megatron.oellm.convert.blocks import bitwise_equal
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import expected_shapes, family_module, hf_to_mcore, mcore_to_hf

TINY_CARDS = ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"]


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
    rng = random.Random()
    tensor = torch.randn(7, 5, generator=torch.Generator().manual_seed(rng.randrange(2**31))).to(dtype)
    flipped = tensor.clone()
    byte = rng.randrange(tensor.numel() * tensor.element_size())
    flipped.reshape(-1).view(torch.uint8)[byte] ^= 1 << rng.randrange(8)
    for check in (same_bits, bitwise_equal):
        assert check(tensor, tensor.clone()), check
        assert not check(tensor, flipped), check
        assert not check(tensor, tensor.view(5, 7)), check
        assert not check(tensor.float(), tensor.double()), check
