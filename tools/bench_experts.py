"""Time the torch-native grouped experts (forward + backward) on the GPU at a card's expert shapes, with the eager
SwiGLU and with megatron-core's fused weighted SwiGLU (``bias_activation_fusion``), same weights and inputs.

    python tools/bench_experts.py [--card qwen3.5-35b-a3b] [--tokens 32768] [--warmup 5] [--steps 20]

The routed rows are ``tokens x top-k``, spread over the experts by a random multinomial draw (so groups are ragged,
as after a real router). Prints one row per path: median milliseconds of forward + backward, peak memory above the
inputs, and the speed-up of the fused path over the eager one.
"""

from __future__ import annotations

from functools import partial

import torch

from megatron.oellm.backends.torch_native import TorchNativeSpecProvider
from megatron.oellm.bench.timing import kernel_tool_parser, median_ms, require_cuda
from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.models import spec_builder
from megatron.oellm.runtime import init_single_gpu_runtime


def build_experts(card: ModelCard, fused: bool) -> torch.nn.Module:
    """The card's grouped experts as the torch-native provider builds them, bf16, on the GPU."""
    config = spec_builder(card.family).transformer_config(card, bias_activation_fusion=fused)
    experts = TorchNativeSpecProvider().grouped_mlp_modules(True)(card.num_experts, config)
    assert experts.fused_swiglu == fused
    return experts


def forward_backward(experts: torch.nn.Module, hidden: torch.Tensor, counts: torch.Tensor, probs: torch.Tensor,
                     grad_out: torch.Tensor) -> None:
    """One forward + backward of the experts from cleared gradients."""
    hidden.grad = probs.grad = None
    experts.zero_grad(set_to_none=True)
    out, _ = experts(hidden, counts, probs)
    out.backward(grad_out)


def median_ms_and_peak_gib(experts: torch.nn.Module, hidden: torch.Tensor, counts: torch.Tensor, probs: torch.Tensor,
                           grad_out: torch.Tensor, warmup: int, steps: int) -> tuple[float, float]:
    """Median milliseconds of forward + backward between CUDA events, and the peak memory above the start, GiB."""
    hidden.grad = probs.grad = None  # a previous run's gradients would count in the base and leave the peak
    experts.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ms = median_ms(partial(forward_backward, experts, hidden, counts, probs, grad_out), warmup, steps)
    return ms, (torch.cuda.max_memory_allocated() - base) / 2**30


def main() -> None:
    """Parse the arguments, time both paths, print the table."""
    parser = kernel_tool_parser(__doc__, with_card=True, builds_layers=True)
    args = parser.parse_args()
    require_cuda(parser)
    card = get_card(args.card)
    init_single_gpu_runtime()
    rows = args.tokens * card.moe_router_topk
    counts = torch.multinomial(torch.ones(card.num_experts), rows, replacement=True).bincount(
        minlength=card.num_experts).cuda()
    hidden = torch.randn(rows, card.hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(rows, device="cuda", requires_grad=True)
    grad_out = torch.randn_like(hidden)
    print(f"{args.card}: {rows} routed rows, {card.num_experts} experts, hidden {card.hidden_size}, "
          f"expert ffn {card.moe_ffn_hidden_size}")
    print(f"{'SwiGLU':<8} {'ms':>8} {'peak GiB':>9}")
    results = {}
    weights = None
    for name, fused in (("eager", False), ("fused", True)):
        experts = build_experts(card, fused)
        if weights is None:
            weights = {key: value.clone() if isinstance(value, torch.Tensor) else value
                       for key, value in experts.state_dict().items()}
        else:
            experts.load_state_dict(weights)
        results[name] = median_ms_and_peak_gib(experts, hidden, counts, probs, grad_out, args.warmup, args.steps)
        print(f"{name:<8} {results[name][0]:>8.3f} {results[name][1]:>9.2f}")
        del experts
    print(f"speed-up {results['eager'][0] / results['fused'][0]:.2f}x")


if __name__ == "__main__":
    main()
