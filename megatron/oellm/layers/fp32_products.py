"""fp32 matrix products of bf16 operands on tensor cores, without TF32's input rounding.

An fp32 product ``a @ b`` whose operands are bf16 values (an fp32 MoE router on bf16 activations and weights) needs
no fp32 GEMM: the product of two bf16 numbers is exact in fp32, so a bf16 tensor-core GEMM that accumulates and
returns fp32 (``torch.mm(..., out_dtype=torch.float32)``) computes the same sums as an fp32 GEMM on the upcast
operands, differing only in the order of the fp32 additions. TF32, the other tensor-core route, rounds the operands
to 10 mantissa bits instead. An fp32 operand that is not a bf16 value (a gradient) is first split into three bf16
terms whose fp32 sum is exactly that operand (:func:`split_into_bf16_terms`), and the three products are added in
fp32 in the same GEMM (:func:`bf16_terms_matmul`, which takes the split so that a gradient's two products reuse
one). On the CPU, where ``torch.mm`` has no ``out_dtype``, the same arithmetic runs on upcast operands.

On an H200 an fp32 GEMM without TF32 runs on the CUDA cores; a Qwen3.5 router's three GEMMs at 32,768 tokens take
1.48 ms this way against 2.65 ms there. The tensor cores' fp32 accumulation is less exact than fp32 FMA, the more so
the longer the inner dimension: relative L2 against float64 2.1e-6 at 2048 (fp32 FMA 3.9e-7) and 1.0e-5 at 32,768;
TF32's operand rounding gives ~3e-4, bf16 ~2e-3 (docs/benchmarks.md, session 16).
"""

from __future__ import annotations

import torch

BF16_TERMS = 3
"""bf16 terms per fp32 value: 3 x 8 significant bits hold fp32's 24."""


def split_into_bf16_terms(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Three bf16 tensors whose fp32 sum, largest term first, is ``x`` (fp32) exactly; each term is the
    round-to-nearest bf16 of what the earlier ones leave. Exact for magnitudes where the last term stays a normal
    bf16 (above about 1e-33); below that the sum differs from ``x`` by at most bf16's smallest subnormal."""
    if x.dtype != torch.float32:
        raise TypeError(f"split_into_bf16_terms takes fp32, got {x.dtype}")
    terms = []
    rest = x
    for _ in range(BF16_TERMS):
        term = rest.to(torch.bfloat16)
        terms.append(term)
        rest = rest - term.float()
    return tuple(terms)


def bf16_matmul_in_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D bf16 ``a`` and ``b``, accumulated and returned in fp32: one tensor-core GEMM on CUDA; on the
    CPU the same exact products summed in fp32 on upcast operands."""
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        raise TypeError(f"bf16_matmul_in_fp32 takes bf16 operands, got {a.dtype} and {b.dtype}")
    if a.is_cuda:
        return torch.mm(a, b, out_dtype=torch.float32)
    return a.float() @ b.float()


def bf16_terms_matmul(terms: tuple[torch.Tensor, ...], b: torch.Tensor) -> torch.Tensor:
    """``sum(terms) @ b`` in fp32 for the bf16 terms of an fp32 matrix (:func:`split_into_bf16_terms`, or their
    transposes: a caller that needs both ``a @ b`` and ``a.T @ c`` splits ``a`` once) and a bf16 ``b``, as one bf16
    GEMM accumulated in fp32. The terms are laid side by side against ``b`` stacked as often (the inner dimension
    tripled; when ``b`` is the smaller operand, a router's input gradient) or stacked on top of each other and their
    products added in fp32 after (the output tripled; a router's weight gradient)."""
    if b.dtype != torch.bfloat16 or any(term.dtype != torch.bfloat16 for term in terms):
        raise TypeError(f"bf16_terms_matmul takes bf16 terms and a bf16 right operand, got {b.dtype}")
    rows, columns = terms[0].shape[0], b.shape[1]
    if b.numel() <= terms[0].numel():
        return bf16_matmul_in_fp32(torch.cat(terms, dim=1), b.repeat(len(terms), 1))
    products = bf16_matmul_in_fp32(torch.cat(terms, dim=0), b).view(len(terms), rows, columns)
    total = products[-1]
    for product in reversed(products[:-1]):
        total = total + product
    return total
