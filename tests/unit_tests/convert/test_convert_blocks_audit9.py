"""Mutation audit of the block maps (session 41): the converter's bitwise comparison and the zero-centred norm shift
it guards. A shift that is exact must convert silently, an inexact one must count the elements it changes, and the
comparison must tell signed zeros, NaN payloads and dtypes of one width apart as its docstring promises."""

from __future__ import annotations

import random
import warnings

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.blocks import bitwise_equal, shift_norm
from megatron.oellm.convert.family import hf_to_mcore, mcore_to_hf
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors, same_bits


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_bitwise_equal_tells_signed_zeros_nan_payloads_and_dtypes_apart(dtype: torch.dtype) -> None:
    """A copy holding NaN is equal to its original (``==`` says it is not); ``-0.0`` and ``+0.0`` differ (``==`` says
    they do not); the same bytes read as another dtype of the same width differ."""
    tensor = torch.randn(random.randint(4, 40)).to(dtype)
    nan_at, zero_at = random.sample(range(len(tensor)), 2)
    tensor[nan_at], tensor[zero_at] = float("nan"), -0.0
    assert bitwise_equal(tensor, tensor.clone())
    positive_zero = tensor.clone()
    positive_zero[zero_at] = 0.0
    assert not bitwise_equal(tensor, positive_zero)
    other = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16, torch.float32: torch.int32}[dtype]
    assert not bitwise_equal(tensor, tensor.view(other))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_an_exactly_invertible_norm_shift_converts_without_a_warning(dtype: torch.dtype) -> None:
    """Trained plain norm weights lie in [0.5, 2], where ``w - 1`` is exact (Sterbenz): the shift to megatron's
    zero-centred weight and back gives ``w`` bit for bit and warns of nothing (a float64 weight too: the shift is
    computed in float64, not float32); the inexact-shift warning is only for weights the round trip really changes."""
    weight = (0.5 + 1.5 * torch.rand(random.randint(8, 64), dtype=torch.float64)).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        centred = shift_norm(weight, -1.0, "x.out_norm.weight")
        back = shift_norm(centred, 1.0, "x.out_norm.weight")
    assert same_bits(weight, back)
    torch.testing.assert_close(centred.double() + 1, weight.double(), rtol=0, atol=0)


def test_a_hybrid_model_round_trip_warns_of_nothing() -> None:
    """The Qwen3.5 GDN gated norm is shifted by -1 into megatron and +1 back; with weights around 1 as trained, the
    conversion in both directions is silent and bit-exact."""
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=random.randrange(2**31))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        back = mcore_to_hf(card, hf_to_mcore(card, hf))
    assert_bitwise_equal(hf, back)


def test_the_inexact_shift_warning_counts_only_the_changed_elements() -> None:
    """The warning names the tensor and how many of its elements the round trip changes: a tiny bf16 weight loses its
    bits in ``w - 1`` (1e-3 - 1 rounds to -1 in bf16), the ones in [0.5, 2] do not."""
    exact = random.randint(1, 20)
    weight = torch.cat([torch.full((1,), 1e-3), 0.5 + 1.5 * torch.rand(exact)]).bfloat16()
    with pytest.warns(UserWarning, match=rf"x\.out_norm\.weight: adding -1 is not exactly invertible for 1 of "
                                         rf"{exact + 1} elements in torch\.bfloat16"):
        shift_norm(weight, -1.0, "x.out_norm.weight")


def test_an_export_that_rounds_trained_gains_says_the_exported_model_differs() -> None:
    """A trained zero-centred gain near 0 (e.g. 0.00284) becomes 1 + w in bf16, whose step near 1 is 2**-7: it
    rounds to 1.0, so the exported model computes with other gains than the trained one, which the warning must say
    (not only that a round trip would differ), with the largest change."""
    small = torch.empty(random.randint(4, 40)).uniform_(-0.0039, 0.0039)  # all within half a step of 1
    weight = small.bfloat16()
    largest = float((1 + weight.double() - (1 + weight.double()).bfloat16().double()).abs().max())
    with pytest.warns(UserWarning, match=rf"x\.out_norm\.weight: adding \+1 is not exactly invertible for "
                                         rf"\d+ of {weight.numel()} elements in torch\.bfloat16 \(each changed by up "
                                         rf"to {largest:.3g}\); the exported model's norm gains differ there from "
                                         r"the trained model's"):
        shifted = shift_norm(weight, 1.0, "x.out_norm.weight")
    assert float((shifted.double() - (1 + weight.double())).abs().max()) == pytest.approx(largest)
