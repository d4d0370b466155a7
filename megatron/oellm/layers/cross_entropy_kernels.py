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
def _row_stats_kernel(logits_ptr, target_ptr, log_sum_exp_ptr, target_logit_ptr, vocab, BLOCK: tl.constexpr):
    """Per row: ``log(sum(exp(x)))`` by the online (running max) rule, and ``x[target]`` (0 if target is -1).

    While every logit read so far is -inf (a masked first block, or a rank's whole slice masked) the running max is
    -inf; the exponentials are then taken relative to 0 instead, since ``exp(-inf - -inf)`` is NaN. A row of -inf
    alone gives -inf (as ``torch.logsumexp`` does), which the tensor-parallel combination treats as an empty sum.
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
    tl.store(log_sum_exp_ptr + row, running_max + tl.log(running_sum))
    tl.store(target_logit_ptr + row, target_logit)


@triton.jit
def _logits_grad_kernel(logits_ptr, grad_ptr, log_sum_exp_ptr, target_ptr, grad_loss_ptr, vocab,
                        BLOCK: tl.constexpr):
    """``grad[row, block] = (exp(x - log_sum_exp) - [column == target]) * grad_loss[row]`` in the logits' dtype."""
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < vocab
    log_sum_exp = tl.load(log_sum_exp_ptr + row)
    target = tl.load(target_ptr + row)
    grad_loss = tl.load(grad_loss_ptr + row)
    x = tl.load(logits_ptr + row * vocab + columns, mask=inside, other=0.0).to(tl.float32)
    grad = tl.exp(x - log_sum_exp) - tl.where(columns == target, 1.0, 0.0)
    tl.store(grad_ptr + row * vocab + columns, (grad * grad_loss).to(grad_ptr.dtype.element_ty), mask=inside)


def row_stats(logits: Tensor, local_target: Tensor) -> tuple[Tensor, Tensor]:
    """fp32 ``(log_sum_exp, target_logit)`` per row of contiguous ``logits`` ``[rows, vocab]``."""
    rows, vocab = logits.shape
    log_sum_exp = torch.empty(rows, dtype=torch.float32, device=logits.device)
    target_logit = torch.empty_like(log_sum_exp)
    _row_stats_kernel[(rows,)](logits, local_target, log_sum_exp, target_logit, vocab, BLOCK=BLOCK, num_warps=8)
    return log_sum_exp, target_logit


def logits_grad(logits: Tensor, log_sum_exp: Tensor, local_target: Tensor, grad_loss: Tensor) -> Tensor:
    """``(softmax - onehot) * grad_loss`` for contiguous ``logits`` ``[rows, vocab]``, in the logits' dtype."""
    rows, vocab = logits.shape
    grad = torch.empty_like(logits)
    _logits_grad_kernel[(rows, triton.cdiv(vocab, BLOCK))](logits, grad, log_sum_exp, local_target, grad_loss,
                                                           vocab, BLOCK=BLOCK, num_warps=8)
    return grad
