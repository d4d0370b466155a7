"""Checks shared by the CPU and GPU tests of the torch-native router's fp32 gating product on bf16 operands."""

import torch

from megatron.oellm.backends.torch_native.router import gating_product
from tests.unit_tests.models.hf_reference import errors

FP32_BOUND = 1e-6
"""Relative L2 error of fp32 logits computed two ways from the same bf16 operands: fp32 accumulation round-off."""
TENSOR_CORE_BOUND = 5e-6
"""The same on a GPU's tensor cores, whose fp32 accumulation is less exact than fp32 FMA (H200, inner dimension 2048:
2.1e-6 against float64, fp32 FMA 3.9e-7). One bf16 rounding of the fp32 operand gives ~2e-3, TF32 ~3e-4."""
TENSOR_CORE_SHARE = 2e-2
"""Share of bf16 gradient elements allowed to differ by one unit from the fp32-copies path on tensor cores: the
weight gradient sums over every token (32,768: fp32 relative error ~1e-5 before the bf16 rounding, 0.64 % of elements
rounded the other way on an H200). A gradient rounded through bf16 on the way differs in about half."""


def bf16_router_gradients(hidden: torch.Tensor, weight: torch.Tensor, upstream: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp32 logits, bf16 input gradient, bf16 weight gradient) of the fp32 gating product of bf16 operands."""
    given_hidden, given_weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logits = gating_product(given_hidden, given_weight, None, torch.float32)
    logits.backward(upstream)
    return logits.detach(), given_hidden.grad, given_weight.grad


def assert_same_as_fp32_copies(tensor_cores: tuple[torch.Tensor, ...], upcast: tuple[torch.Tensor, ...],
                               logits_bound: float = FP32_BOUND, share_bound: float = 1e-3) -> list[float]:
    """The bf16 tensor-core path against the fp32-copies path: logits within ``logits_bound`` (relative L2), and the
    bf16 gradients equal but for a share of at most ``share_bound`` of elements whose fp32 values sit at a bf16
    rounding boundary (a gradient rounded through bf16 on the way, or an fp32 gradient split into fewer exact terms,
    differs in a large share). Returns the differing shares of the input and weight gradients."""
    assert errors(tensor_cores[0], upcast[0])[0] <= logits_bound
    shares = []
    for ours, reference in zip(tensor_cores[1:], upcast[1:], strict=True):
        assert ours.dtype == reference.dtype == torch.bfloat16
        shares.append((ours != reference).float().mean().item())
        assert shares[-1] <= share_bound, shares
        assert errors(ours, reference)[1] <= 2 ** -7  # one bf16 unit in the last place, where they differ
    return shares

