"""Moving MoE tokens to their experts' rows and back, without atomic adds.

An MoE layer copies each token to one row per chosen expert (``rows = tokens[index]``, ``index`` naming the token of
every permuted row) and later adds each token's rows back into it. Written with ``index_select`` and
``scatter_add_``, as megatron-core 0.19.2 does without Transformer Engine, both the backward of the copy and the
forward of the add are atomic adds of bf16 rows into the tokens: about 5 ms and 2 ms per Qwen3.5 MoE layer at
32,768 tokens x top 8 on an H200, non-deterministic, and each element rounded to bf16 after every add.

Here both are a per-token sum of that token's rows (:func:`sum_rows_by_index`): the rows are put in token order once
(a stable ``argsort`` of ``index`` and a ``searchsorted`` for where each token's rows start, on the device, no host
sync), then the Triton kernel of :mod:`megatron.oellm.layers.token_permutation_kernels` adds each token's rows in fp32
registers and rounds once. :func:`gather_rows` is the copy with that sum as its backward, :func:`scatter_sum_rows`
the add with a gather as its backward. On the CPU (unless ``TRITON_INTERPRET=1``) the sum is an fp32 ``index_add_``;
:func:`sum_rows_reference` is the float64 definition the tests compare both against.
"""

from __future__ import annotations

import torch
from torch import Tensor

from megatron.oellm.layers.triton_launch import on_device, runs_on


def sum_rows_reference(rows: Tensor, index: Tensor, num_tokens: int) -> Tensor:
    """The definition in float64: ``out[t] = sum(rows[j] for j where index[j] == t)``, zeros for tokens without rows."""
    out = torch.zeros(num_tokens, rows.shape[1], dtype=torch.float64, device=rows.device)
    return out.index_add_(0, index, rows.double())


def sum_rows_by_index_eager(rows: Tensor, index: Tensor, num_tokens: int) -> Tensor:
    """:func:`sum_rows_by_index` with torch ops: an ``index_add_`` in fp32 (fp64 for fp64 rows), rounded once to
    ``rows.dtype``."""
    accumulator = torch.promote_types(rows.dtype, torch.float32)
    out = torch.zeros(num_tokens, rows.shape[1], dtype=accumulator, device=rows.device)
    return out.index_add_(0, index, rows.to(accumulator)).to(rows.dtype)


def _use_kernel(rows: Tensor) -> bool:
    """Whether :func:`sum_rows_by_index` runs the Triton kernel (fp32 accumulator): on CUDA, or on the CPU under
    ``TRITON_INTERPRET=1``, for rows other than fp64 (summed in fp64 by the eager path)."""
    return rows.dtype != torch.float64 and runs_on(rows)


def sum_rows_by_index(rows: Tensor, index: Tensor, num_tokens: int) -> Tensor:
    """``[num_tokens, columns]`` in ``rows.dtype``: for each token the fp32 (fp64 for fp64 rows) sum of the rows of
    ``rows`` (``[n, columns]``) whose ``index`` (``n`` token ids in ``[0, num_tokens)``) names it; deterministic, one
    rounding.

    Tokens may own any number of rows, none included (capacity dropping, padding). The kernel does not check the
    ids (that would need a host sync): an id outside ``[0, num_tokens)`` is ignored there, while the eager path
    raises. Not differentiable by itself; :func:`gather_rows` and :func:`scatter_sum_rows` are the differentiable
    operations built on it.
    """
    if rows.dim() != 2 or index.dim() != 1 or index.shape[0] != rows.shape[0]:
        raise ValueError(f"sum_rows_by_index takes rows [n, columns] and an index [n]; got {tuple(rows.shape)} "
                         f"and {tuple(index.shape)}")
    if not _use_kernel(rows):
        return sum_rows_by_index_eager(rows, index, num_tokens)
    from megatron.oellm.layers import token_permutation_kernels

    sorted_index, order = torch.sort(index.long(), stable=True)
    starts = torch.searchsorted(sorted_index, torch.arange(num_tokens + 1, device=index.device, dtype=torch.long))
    with on_device(rows):
        return token_permutation_kernels.sum_rows(rows.contiguous(), order, starts, num_tokens)


class _GatherRows(torch.autograd.Function):
    """``tokens[index]``; the backward sums each token's row gradients (:func:`scatter_sum_rows`, so a second
    derivative goes through the gather again)."""

    @staticmethod
    def forward(ctx, tokens: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.num_tokens = tokens.shape[0]
        return tokens.index_select(0, index)

    @staticmethod
    def backward(ctx, grad_rows: Tensor) -> tuple[Tensor, None]:
        (index,) = ctx.saved_tensors
        return scatter_sum_rows(grad_rows, index, ctx.num_tokens), None


class _ScatterSumRows(torch.autograd.Function):
    """:func:`sum_rows_by_index`; the backward hands each row its token's gradient (:func:`gather_rows`)."""

    @staticmethod
    def forward(ctx, rows: Tensor, index: Tensor, num_tokens: int) -> Tensor:
        ctx.save_for_backward(index)
        return sum_rows_by_index(rows, index, num_tokens)

    @staticmethod
    def backward(ctx, grad_tokens: Tensor) -> tuple[Tensor, None, None]:
        (index,) = ctx.saved_tensors
        return gather_rows(grad_tokens, index), None, None


def gather_rows(tokens: Tensor, index: Tensor) -> Tensor:
    """``tokens[index]`` (``[n, hidden]`` from ``[num_tokens, hidden]``), differentiable, with a backward that sums
    each token's row gradients in fp32 instead of adding them atomically."""
    return _GatherRows.apply(tokens, index)


def scatter_sum_rows(rows: Tensor, index: Tensor, num_tokens: int) -> Tensor:
    """Each token's rows of ``rows`` summed (:func:`sum_rows_by_index`), differentiable in ``rows``."""
    return _ScatterSumRows.apply(rows, index, num_tokens)
