"""Triton kernel of :mod:`megatron.oellm.layers.token_permutation`: the per-token sum of permuted rows.

The rows belonging to one token are listed in ``order`` (the permuted rows sorted by token, stable) between
``starts[token]`` and ``starts[token + 1]``. A program owns one token and one block of columns: it loads that token's
rows one after another, adds them in fp32 registers and writes the sum once in the output's dtype. No atomics, so
the result is deterministic and each output element is rounded once; a token without rows gets zeros. Offsets are
int64. With ``TRITON_INTERPRET=1`` Triton runs it on CPU tensors, which is how the CPU tests exercise it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

_BLOCK_COLUMNS = 1024
"""Columns per program (hidden 2048: two programs per token); not tuned."""


@triton.jit
def _sum_rows_kernel(rows_ptr, order_ptr, starts_ptr, out_ptr, columns, BLOCK_COLUMNS: tl.constexpr):
    """``out[token] = sum(rows[order[j]] for j in starts[token]:starts[token + 1])`` over this block of columns."""
    token = tl.program_id(0)
    column_ids = tl.program_id(1) * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)
    inside = column_ids < columns
    start = tl.load(starts_ptr + token)
    end = tl.load(starts_ptr + token + 1)
    total = tl.zeros([BLOCK_COLUMNS], tl.float32)
    for position in range(start, end):
        row = tl.load(order_ptr + position)
        total += tl.load(rows_ptr + row * columns + column_ids, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + token.to(tl.int64) * columns + column_ids, total.to(out_ptr.dtype.element_ty), mask=inside)


def sum_rows(rows: Tensor, order: Tensor, starts: Tensor, num_tokens: int) -> Tensor:
    """``[num_tokens, columns]`` in ``rows.dtype``: each token's rows of ``rows`` (contiguous ``[n, columns]``)
    summed in fp32; ``order`` (int64, ``n``) and ``starts`` (int64, ``num_tokens + 1``) as in the module docstring."""
    columns = rows.shape[1]
    out = torch.empty(num_tokens, columns, dtype=rows.dtype, device=rows.device)
    if num_tokens == 0 or columns == 0:
        return out
    grid = (num_tokens, triton.cdiv(columns, _BLOCK_COLUMNS))
    _sum_rows_kernel[grid](rows, order, starts, out, columns, BLOCK_COLUMNS=_BLOCK_COLUMNS, num_warps=4)
    return out
