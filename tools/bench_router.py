"""Time the torch-native MoE router's fp32 gating product (forward + backward) on the GPU at a card's shapes, bf16
activations and weights: exact bf16 products on the tensor cores against fp32 copies on the CUDA cores
(``OELLM_FP32_OPERAND_ROUTER=1``), same operands, TF32 off.

    python tools/bench_router.py [--card qwen3.5-35b-a3b] [--tokens 32768] [--warmup 5] [--steps 20]

Prints one row per path: median milliseconds of forward + backward and the logits' relative L2 error against
float64, then the speed-up.
"""

from __future__ import annotations

import os
from functools import partial

import torch

from megatron.oellm import switches
from megatron.oellm.backends.torch_native.router import gating_product, uses_bf16_tensor_cores
from megatron.oellm.bench.timing import kernel_tool_parser, median_ms, require_cuda
from megatron.oellm.cards import get_card


def forward_backward(hidden: torch.Tensor, weight: torch.Tensor, upstream: torch.Tensor) -> None:
    """One forward + backward of the fp32 gating product from cleared gradients."""
    hidden.grad = weight.grad = None
    gating_product(hidden, weight, None, torch.float32).backward(upstream)


def main() -> None:
    """Parse the arguments, time both paths, print the table."""
    parser = kernel_tool_parser(__doc__, with_card=True)
    args = parser.parse_args()
    require_cuda(parser)
    card = get_card(args.card)
    torch.backends.cuda.matmul.allow_tf32 = False
    hidden = torch.randn(args.tokens, card.hidden_size, device="cuda").bfloat16().requires_grad_()
    weight = (0.02 * torch.randn(card.num_experts, card.hidden_size, device="cuda")).bfloat16().requires_grad_()
    upstream = 1e-4 * torch.randn(args.tokens, card.num_experts, device="cuda")
    exact = hidden.detach().double() @ weight.detach().double().t()
    print(f"{args.card}: {args.tokens} tokens, hidden {card.hidden_size}, {card.num_experts} experts")
    print(f"{'path':<13} {'ms':>8} {'logits err':>11}")
    results = {}
    for name, fp32_copies in (("fp32 copies", True), ("tensor cores", False)):
        os.environ[switches.FP32_OPERAND_ROUTER] = "1" if fp32_copies else "0"
        assert uses_bf16_tensor_cores(hidden, weight, torch.float32) != fp32_copies
        with torch.no_grad():
            logits = gating_product(hidden, weight, None, torch.float32)
        error = float((logits.double() - exact).norm() / exact.norm())
        results[name] = median_ms(partial(forward_backward, hidden, weight, upstream), args.warmup, args.steps)
        print(f"{name:<13} {results[name]:>8.3f} {error:>11.2e}")
    os.environ.pop(switches.FP32_OPERAND_ROUTER)
    print(f"speed-up {results['fp32 copies'] / results['tensor cores']:.2f}x")


if __name__ == "__main__":
    main()
