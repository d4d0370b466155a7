"""Time RMSNorm forward + backward on the GPU at the Qwen3.5 proxy's shapes (MBS 8 x 4096 tokens): the Triton
kernels of ``megatron.oellm.layers.rms_norm`` against the eager fp32 path, in the same process on the same inputs.

    python tools/bench_rms_norm.py [--tokens 32768] [--warmup 5] [--steps 20]

Prints one row per shape: the median milliseconds of a forward + backward of each path and their ratio.
"""

from __future__ import annotations

from functools import partial

import torch

from megatron.oellm.bench.timing import kernel_tool_parser, median_ms, require_cuda
from megatron.oellm.layers.rms_norm import EAGER_ENV, cuda_path, rms_norm, rms_norm_eager

SHAPES = {
    "input / pre-MLP / final norm (hidden 2048)": (1, 2048),
    "GDN output norm (32 value heads x 128)": (32, 128),
    "attention QK norm (16 + 2 heads x 256)": (18, 256),
}
"""Norms of the Qwen3.5-35B-A3B proxy: rows per token and the width normalised over."""


def forward_backward(norm, x: torch.Tensor, weight: torch.Tensor, grad_y: torch.Tensor) -> None:
    """One forward + backward of ``norm`` from cleared gradients."""
    x.grad = weight.grad = None
    norm(x, weight, 1e-6, True).backward(grad_y)


def main() -> None:
    """Parse the arguments, time both paths per shape, print the table."""
    parser = kernel_tool_parser(__doc__)
    args = parser.parse_args()
    if cuda_path() != "triton":  # both columns would time the eager path, and the speed-up read 1.00x
        parser.error(f"{EAGER_ENV}=1 is set, so rms_norm would run the eager path too; unset it to time the kernels")
    require_cuda(parser)
    print(f"{'norm':<46} {'rows x width':>16} {'eager ms':>9} {'kernels ms':>10} {'speed-up':>8}")
    for name, (per_token, width) in SHAPES.items():
        rows = args.tokens * per_token
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        weight = (0.1 * torch.randn(width, device="cuda")).to(torch.bfloat16).requires_grad_()
        grad_y = torch.randn_like(x)
        eager, fused = (median_ms(partial(forward_backward, norm, x, weight, grad_y), args.warmup, args.steps)
                        for norm in (rms_norm_eager, rms_norm))
        print(f"{name:<46} {f'{rows} x {width}':>16} {eager:>9.3f} {fused:>10.3f} {eager / fused:>7.2f}x")


if __name__ == "__main__":
    main()
