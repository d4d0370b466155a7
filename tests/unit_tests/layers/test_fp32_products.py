"""fp32 products of bf16 operands (``megatron.oellm.layers.fp32_products``) against float64: the exact bf16 split of
fp32 values, and the products on the CPU (upcast arithmetic) and on the GPU (tensor cores, Qwen3.5's router shape)."""

import pytest
import torch

from megatron.oellm.layers.fp32_products import (
    bf16_matmul_in_fp32,
    bf16_terms_matmul,
    split_into_bf16_terms,
)
from tests.unit_tests.models.hf_reference import errors, fresh_seed

BOUND = {"cpu": 1e-6, "cuda": 2e-5}
"""Relative L2 error of an fp32 product against float64: fp32 accumulation round-off. The tensor cores accumulate
less exactly than fp32 FMA, more so the longer the inner dimension (H200: 2.1e-6 at 2048, 1.0e-5 at 32,768; fp32 FMA
3.9e-7 at 2048). One bf16 rounding of an fp32 operand (a split into one term) gives
~2e-3, TF32's operand rounding ~3e-4."""


def wide_range_fp32(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """fp32 values of both signs, magnitudes spread over 1e-30 .. 1e31 (gradients span many decades; below ~1e-33
    the third term would be a bf16 subnormal)."""
    signs = torch.randint(0, 2, shape, generator=generator).float() * 2 - 1
    mantissas = 1 + 9 * torch.rand(shape, generator=generator)
    exponents = torch.randint(-30, 31, shape, generator=generator).float()
    return signs * mantissas * torch.pow(10.0, exponents)


def test_three_bf16_terms_sum_to_the_fp32_value_exactly() -> None:
    generator = torch.Generator().manual_seed(fresh_seed())
    x = wide_range_fp32((4096,), generator)
    terms = split_into_bf16_terms(x)
    assert [t.dtype for t in terms] == [torch.bfloat16] * 3
    assert torch.equal(terms[0].float() + terms[1].float() + terms[2].float(), x)
    assert not torch.equal(terms[0].float() + terms[1].float(), x)  # two terms hold 16 bits, not fp32's 24
    transposed = x.view(64, 64).t()
    assert torch.equal(sum(t.float() for t in split_into_bf16_terms(transposed)), transposed)


def test_the_split_and_the_products_refuse_other_dtypes() -> None:
    with pytest.raises(TypeError, match="fp32"):
        split_into_bf16_terms(torch.randn(4, dtype=torch.float64))
    with pytest.raises(TypeError, match="bf16 operands"):
        bf16_matmul_in_fp32(torch.randn(2, 3), torch.randn(3, 2).bfloat16())
    with pytest.raises(TypeError, match="bf16 terms and a bf16 right operand"):
        bf16_terms_matmul(split_into_bf16_terms(torch.randn(2, 3)), torch.randn(3, 2))
    with pytest.raises(TypeError, match="bf16 terms"):
        bf16_terms_matmul((torch.randn(2, 3),), torch.randn(3, 2).bfloat16())


def random_operands(tokens: int, hidden: int, experts: int, device: str
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A router's operands with fresh random values on ``device``: bf16 activations ``[tokens, hidden]``, the bf16
    weight transposed ``[hidden, experts]`` and an fp32 gradient of the logits ``[tokens, experts]``."""
    generator = torch.Generator().manual_seed(fresh_seed())
    activations = torch.randn(tokens, hidden, generator=generator).bfloat16()
    weight_t = (0.02 * torch.randn(hidden, experts, generator=generator)).bfloat16()
    grad_logits = torch.randn(tokens, experts, generator=generator) * 1e-5
    return activations.to(device), weight_t.to(device), grad_logits.to(device)


def product_errors(device: str, tokens: int, hidden: int, experts: int) -> dict[str, float]:
    """Relative L2 error against float64 of a router's three products (the logits, the input gradient with the
    terms side by side, the weight gradient with the terms stacked, its fp32 operand transposed) and of the input
    gradient through a split into one term (what the products must beat)."""
    activations, weight_t, grad = random_operands(tokens, hidden, experts, device)
    logits = bf16_matmul_in_fp32(activations, weight_t)
    terms = split_into_bf16_terms(grad)
    grad_input = bf16_terms_matmul(terms, weight_t.t())
    grad_weight = bf16_terms_matmul(tuple(term.t() for term in terms), activations)
    assert logits.dtype == grad_input.dtype == grad_weight.dtype == torch.float32
    one_term = bf16_matmul_in_fp32(grad.bfloat16(), weight_t.t())
    return {
        "logits": errors(logits, activations.double() @ weight_t.double())[0],
        "input gradient": errors(grad_input, grad.double() @ weight_t.double().t())[0],
        "weight gradient": errors(grad_weight, grad.double().t() @ activations.double())[0],
        "input gradient, one term": errors(one_term, grad.double() @ weight_t.double().t())[0],
    }


def check_products(device: str, tokens: int, hidden: int, experts: int) -> None:
    """Every product within the device's bound; a split into one term more than 10x beyond it."""
    measured = product_errors(device, tokens, hidden, experts)
    bound = BOUND[device]
    contrast = measured.pop("input gradient, one term")
    assert max(measured.values()) <= bound, measured
    assert contrast > 10 * bound, contrast


def test_products_on_the_cpu_match_float64() -> None:
    check_products("cpu", 96, 64, 8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tensor_core_products_at_the_router_shape_match_float64() -> None:
    """Qwen3.5's router at 8 x 4096 tokens: 32,768 x 2048 activations, 256 experts, on the GPU's tensor cores."""
    check_products("cuda", 32768, 2048, 256)
