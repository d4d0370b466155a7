"""Triton kernels of :mod:`megatron.oellm.layers.cross_entropy`: one pass over the logits forward, one backward.

Both work on logits viewed as ``[rows, vocab]`` (one row per token, this rank's vocabulary slice, contiguous) and
compute in fp32 registers only. Row offsets are int64: ``rows x vocab`` exceeds 2**31 at real sizes (32,768 tokens
x 248,320). With ``TRITON_INTERPRET=1`` Triton runs them on CPU tensors, which is how the CPU tests exercise them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK = 4096
"""Vocabulary columns per loop step (forward) or per program (backward)."""


@triton.jit
def _row_stats_kernel(logits_ptr, target_ptr, row_max_ptr, log_sum_ptr, target_logit_ptr, vocab, BLOCK: tl.constexpr):
    """Per row: the max ``m``, ``log(sum(exp(x - m)))`` by the online (running max) rule, and ``x[target]`` (0 if
    target is -1). The log-sum-exp is ``m + log_sum``, kept as two numbers: at large logits (1e4 in fp32) their sum
    would round to a step of 1e-3, an error the loss ``log_sum - (x[target] - m)`` and the softmax
    ``exp((x - m) - log_sum)`` would both inherit.

    While every logit read so far is -inf (a masked first block, or a rank's whole slice masked) the running max is
    -inf; the exponentials are then taken relative to 0 instead, since ``exp(-inf - -inf)`` is NaN. A row of -inf
    alone gives ``m = log_sum = -inf`` (a log-sum-exp of -inf, as ``torch.logsumexp`` gives), which the
    tensor-parallel combination treats as an empty sum.
    """
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(target_ptr + row)
    row_start = logits_ptr + row * vocab
    running_max = tl.full([], float("-inf"), tl.float32)
    running_sum = tl.zeros([], tl.float32)
    target_logit = tl.zeros([], tl.float32)
    for start in range(0, vocab, BLOCK):
        columns = start + tl.arange(0, BLOCK)
        inside = columns < vocab
        x = tl.load(row_start + columns, mask=inside, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(x, axis=0))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # all -inf so far: no NaN from -inf - -inf
        running_sum = running_sum * tl.exp(running_max - shift) + tl.sum(tl.exp(x - shift), axis=0)
        running_max = new_max
        target_logit += tl.sum(tl.where(columns == target, x, 0.0), axis=0)
    tl.store(row_max_ptr + row, running_max)
    tl.store(log_sum_ptr + row, tl.log(running_sum))
    tl.store(target_logit_ptr + row, target_logit)


@triton.jit
def _logits_grad_kernel(logits_ptr, grad_ptr, row_max_ptr, log_sum_ptr, target_ptr, grad_loss_ptr, vocab,
                        BLOCK: tl.constexpr):
    """``grad[row, block] = (exp((x - row_max) - log_sum) - [column == target]) * grad_loss[row]`` in the logits'
    dtype."""
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < vocab
    row_max = tl.load(row_max_ptr + row)
    log_sum = tl.load(log_sum_ptr + row)
    target = tl.load(target_ptr + row)
    grad_loss = tl.load(grad_loss_ptr + row)
    x = tl.load(logits_ptr + row * vocab + columns, mask=inside, other=0.0).to(tl.float32)
    grad = tl.exp((x - row_max) - log_sum) - tl.where(columns == target, 1.0, 0.0)
    tl.store(grad_ptr + row * vocab + columns, (grad * grad_loss).to(grad_ptr.dtype.element_ty), mask=inside)


def row_stats(logits: Tensor, local_target: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """fp32 ``(row_max, log_sum, target_logit)`` per row of contiguous ``logits`` ``[rows, vocab]`` (the kernel's
    docstring)."""
    rows, vocab = logits.shape
    row_max = torch.empty(rows, dtype=torch.float32, device=logits.device)
    log_sum, target_logit = torch.empty_like(row_max), torch.empty_like(row_max)
    _row_stats_kernel[(rows,)](logits, local_target, row_max, log_sum, target_logit, vocab, BLOCK=BLOCK,
                               num_warps=8)
    return row_max, log_sum, target_logit


def logits_grad(logits: Tensor, row_max: Tensor, log_sum: Tensor, local_target: Tensor, grad_loss: Tensor) -> Tensor:
    """``(softmax - onehot) * grad_loss`` for contiguous ``logits`` ``[rows, vocab]``, in the logits' dtype; the
    softmax is ``exp((x - row_max) - log_sum)``."""
    rows, vocab = logits.shape
    grad = torch.empty_like(logits)
    _logits_grad_kernel[(rows, triton.cdiv(vocab, BLOCK))](logits, grad, row_max, log_sum, local_target, grad_loss,
                                                           vocab, BLOCK=BLOCK, num_warps=8)
    return grad
