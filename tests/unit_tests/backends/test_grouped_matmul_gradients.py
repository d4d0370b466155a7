"""``grouped_matmul``'s backward with any gradient layout, against a float64 per-expert loop (CPU: torch's own
``_grouped_mm`` fallback; the GPU kernel runs in ``test_torch_native_gpu.py``)."""

from __future__ import annotations

import pytest
import torch

from megatron.oellm.backends.torch_native.grouped_mlp import grouped_matmul


def _inputs(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens sorted by expert (one expert empty), stacked weights and the int32 cumulative offsets."""
    counts = [int(c) for c in torch.randint(1, 7, (4,), generator=generator)] + [0]
    x = torch.randn(sum(counts), 12, generator=generator, requires_grad=True)
    weight = torch.randn(len(counts), 8, 12, generator=generator, requires_grad=True)  # 16-byte aligned rows
    return x, weight, torch.tensor(counts).cumsum(0).to(torch.int32)


@pytest.mark.parametrize("gradient", ["broadcast", "transposed", "random"])
def test_backward_takes_any_gradient_layout(gradient: str) -> None:
    """``out.sum().backward()`` hands the product a broadcast (stride 0) gradient, which torch's grouped GEMM
    backward refused ('Invalid strides/sizes'); a transposed and a plain one are the guards."""
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x, weight, offsets = _inputs(generator)
    out = grouped_matmul(x, weight, offsets)
    grad = {"broadcast": torch.ones(1, 1).expand_as(out),
            "transposed": torch.randn(out.shape[1], out.shape[0], generator=generator).t(),
            "random": torch.randn(out.shape, generator=generator)}[gradient]
    out.backward(grad)
    starts = [0, *offsets.tolist()]
    for e in range(weight.shape[0]):
        rows = slice(starts[e], starts[e + 1])
        g, w, xs = grad[rows].double(), weight[e].detach().double(), x[rows].detach().double()
        torch.testing.assert_close(out[rows].detach().double(), xs @ w.T, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad[rows].double(), g @ w, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(weight.grad[e].double(), g.T @ xs, rtol=1e-5, atol=1e-5)
