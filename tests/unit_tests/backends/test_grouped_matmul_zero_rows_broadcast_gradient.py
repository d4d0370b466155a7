"""A broadcast gradient (``out.sum().backward()``) through the torch-native grouped GEMM of zero token rows (an EP rank
that received no tokens): torch's grouped GEMM backward refuses its ``[0, 0]`` strides ("Invalid strides/sizes"),
which ``contiguous`` leaves as they are for an empty tensor. Each loss adds a random multiple of the weights, so the
expected weight gradient is that multiple (the empty grouped GEMM adds nothing to it)."""

import pytest
import torch
from backend_setup import random_cpu_experts

from megatron.oellm.backends.torch_native.grouped_mlp import grouped_matmul

EXPERTS, HIDDEN, FFN = 4, 16, 8


def test_the_grouped_matmul_of_zero_rows_takes_a_broadcast_gradient() -> None:
    weight = torch.randn(EXPERTS, FFN, HIDDEN, requires_grad=True)
    scale = torch.randn_like(weight)
    x = torch.randn(0, HIDDEN, requires_grad=True)
    out = grouped_matmul(x, weight, torch.zeros(EXPERTS, dtype=torch.int32))
    (out.sum() + (scale * weight).sum()).backward()
    torch.testing.assert_close(weight.grad, scale, rtol=0, atol=0)
    assert x.grad is not None and x.grad.shape == x.shape


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "plain"])
def test_the_experts_of_a_rank_without_tokens_take_a_broadcast_gradient(world_of_one, gated: bool) -> None:
    experts = random_cpu_experts(EXPERTS, HIDDEN, FFN, gated=gated)
    scales = {name: torch.randn_like(parameter) for name, parameter in experts.named_parameters()}
    hidden = torch.randn(0, HIDDEN, requires_grad=True)
    out, _ = experts(hidden, torch.zeros(EXPERTS, dtype=torch.long), torch.rand(0))
    weighted = sum((scales[name] * parameter).sum() for name, parameter in experts.named_parameters())
    (out.sum() + weighted).backward()
    for name, parameter in experts.named_parameters():
        torch.testing.assert_close(parameter.grad, scales[name], rtol=0, atol=0, msg=name)
