"""Checks shared by the CPU and GPU tests of the torch-native router's fp32 gating product on bf16 operands."""

import torch

from megatron.oellm.backends.torch_native.router import gating_product
from tests.unit_tests.models.hf_reference import errors

FP32_BOUND = 1e-6
"""Relative L2 error of fp32 logits computed two ways from the same bf16 operands: fp32 accumulation round-off."""


def bf16_router_gradients(hidden: torch.Tensor, weight: torch.Tensor, upstream: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp32 logits, bf16 input gradient, bf16 weight gradient) of the fp32 gating product of bf16 operands."""
    given_hidden, given_weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logits = gating_product(given_hidden, given_weight, None, torch.float32)
    logits.backward(upstream)
    return logits.detach(), given_hidden.grad, given_weight.grad


def assert_same_as_fp32_copies(tensor_cores: tuple[torch.Tensor, ...], upcast: tuple[torch.Tensor, ...]) -> None:
    """The bf16 tensor-core path against the fp32-copies path: logits within fp32 round-off, and the bf16 gradients
    equal but for the rare element whose fp32 value sits at a bf16 rounding boundary (a gradient rounded through bf16
    on the way, an fp32 gradient split into fewer exact terms, differs in a large share of elements)."""
    assert errors(tensor_cores[0], upcast[0])[0] <= FP32_BOUND
    for ours, reference in zip(tensor_cores[1:], upcast[1:], strict=True):
        assert ours.dtype == reference.dtype == torch.bfloat16
        differing = (ours != reference).float().mean().item()
        assert differing <= 1e-3, differing
        assert errors(ours, reference)[1] <= 2 ** -7  # one bf16 unit in the last place, where they differ

