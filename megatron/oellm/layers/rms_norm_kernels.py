"""Triton kernels of :mod:`megatron.oellm.layers.rms_norm`: one pass forward, one pass backward.

Both see the input as ``[rows, columns]`` (contiguous; the norm runs over ``columns``) and compute in fp32 registers
only; the input, the output and the input gradient stay in the input's dtype. A program handles ``BLOCK_ROWS`` whole
rows at a time (``BLOCK_COLUMNS`` is ``columns`` rounded up to a power of two), so the per-row sum of squares needs no
second pass. The backward kernel is persistent: each program loops over row blocks and accumulates its share of the
weight gradient in registers, then writes one fp32 row of partial sums; the caller adds those rows (a fixed order, so
the result is deterministic). Row offsets are int64. With ``TRITON_INTERPRET=1`` Triton runs them on CPU tensors,
which is how the CPU tests exercise them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

_ELEMENTS_PER_PROGRAM = 4096
"""Elements one program holds at a time (rows x padded columns) where the width allows: rows per program =
4096 / padded width, at least one, so narrow norms (a QK norm over a 128-wide head) still give each program enough
work. Wider rows are one row per program (up to 16,384 elements, where the backward spills a little)."""
_PROGRAMS_PER_SM = 4
"""Backward programs launched per streaming multiprocessor (those that do not fit at once run in a later wave);
each writes one fp32 row of weight-gradient partial sums. Measured, not tuned: ``tools/bench_rms_norm.py``."""


@triton.jit
def _forward_kernel(x_ptr, weight_ptr, y_ptr, rstd_ptr, rows, columns, eps, shift,
                    BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr):
    """``y = x * rstd * (weight + shift)`` per row, ``rstd = 1 / sqrt(mean(x**2) + eps)``, which is also stored."""
    row_ids = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    column_ids = tl.arange(0, BLOCK_COLUMNS)
    row_inside, column_inside = row_ids < rows, column_ids < columns
    inside = row_inside[:, None] & column_inside[None, :]
    offsets = row_ids.to(tl.int64)[:, None] * columns + column_ids[None, :]
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / columns + eps)
    gamma = tl.load(weight_ptr + column_ids, mask=column_inside, other=0.0).to(tl.float32) + shift
    y = x * rstd[:, None] * gamma[None, :]
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=inside)
    tl.store(rstd_ptr + row_ids, rstd, mask=row_inside)


@triton.jit
def _backward_kernel(grad_y_ptr, x_ptr, weight_ptr, rstd_ptr, grad_x_ptr, grad_weight_partial_ptr, rows, columns,
                     shift, BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr, WEIGHT_GRAD: tl.constexpr):
    """``grad_x = rstd * (g - x_hat * mean(g * x_hat))`` with ``g = grad_y * gamma`` and ``x_hat = x * rstd``; with
    ``WEIGHT_GRAD`` this program's ``sum(grad_y * x_hat)`` over its rows goes to its row of ``grad_weight_partial``."""
    program = tl.program_id(0)
    column_ids = tl.arange(0, BLOCK_COLUMNS)
    column_inside = column_ids < columns
    gamma = tl.load(weight_ptr + column_ids, mask=column_inside, other=0.0).to(tl.float32) + shift
    grad_weight = tl.zeros([BLOCK_COLUMNS], tl.float32)
    for block in range(program, tl.cdiv(rows, BLOCK_ROWS), tl.num_programs(0)):
        row_ids = block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_inside = row_ids < rows
        inside = row_inside[:, None] & column_inside[None, :]
        offsets = row_ids.to(tl.int64)[:, None] * columns + column_ids[None, :]
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        grad_y = tl.load(grad_y_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row_ids, mask=row_inside, other=0.0)
        x_hat = x * rstd[:, None]
        g = grad_y * gamma[None, :]
        projection = tl.sum(g * x_hat, axis=1) / columns
        grad_x = (g - x_hat * projection[:, None]) * rstd[:, None]
        tl.store(grad_x_ptr + offsets, grad_x.to(grad_x_ptr.dtype.element_ty), mask=inside)
        if WEIGHT_GRAD:
            grad_weight += tl.sum(grad_y * x_hat, axis=0)
    if WEIGHT_GRAD:
        tl.store(grad_weight_partial_ptr + program.to(tl.int64) * columns + column_ids, grad_weight,
                 mask=column_inside)


def _blocks(columns: int) -> tuple[int, int, int]:
    """(BLOCK_ROWS, BLOCK_COLUMNS, num_warps) for rows of ``columns`` elements."""
    block_columns = triton.next_power_of_2(columns)
    block_rows = max(1, _ELEMENTS_PER_PROGRAM // block_columns)
    return block_rows, block_columns, 8 if block_columns >= 8192 else 4


def forward(x: Tensor, weight: Tensor, eps: float, shift: float) -> tuple[Tensor, Tensor]:
    """``(y, rstd)`` of ``x`` ``[rows, columns]`` (contiguous, at most ``rms_norm.MAX_COLUMNS`` columns): ``y`` in
    ``x.dtype``, ``rstd`` fp32 per row."""
    rows, columns = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    block_rows, block_columns, num_warps = _blocks(columns)
    _forward_kernel[(triton.cdiv(rows, block_rows),)](x, weight, y, rstd, rows, columns, eps, shift,
                                                       BLOCK_ROWS=block_rows, BLOCK_COLUMNS=block_columns,
                                                       num_warps=num_warps)
    return y, rstd


def backward(grad_y: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, shift: float,
             weight_grad: bool) -> tuple[Tensor, Tensor | None]:
    """``(grad_x, grad_weight)``: ``grad_x`` in ``x.dtype``, ``grad_weight`` fp32 (the caller casts it), or None
    without ``weight_grad`` (a frozen weight: no partial sums are computed)."""
    rows, columns = x.shape
    block_rows, block_columns, num_warps = _blocks(columns)
    row_blocks = triton.cdiv(rows, block_rows)
    if x.is_cuda:
        programs = min(row_blocks, _PROGRAMS_PER_SM * torch.cuda.get_device_properties(x.device).multi_processor_count)
    else:  # the interpreter: a few programs still exercise the loop and the partial sums
        programs = min(row_blocks, 3)
    grad_x = torch.empty_like(x)
    partial = torch.empty(programs if weight_grad else 1, columns, dtype=torch.float32, device=x.device)
    _backward_kernel[(programs,)](grad_y, x, weight, rstd, grad_x, partial, rows, columns, shift,
                                  BLOCK_ROWS=block_rows, BLOCK_COLUMNS=block_columns, WEIGHT_GRAD=weight_grad,
                                  num_warps=num_warps)
    return grad_x, partial.sum(dim=0) if weight_grad else None
