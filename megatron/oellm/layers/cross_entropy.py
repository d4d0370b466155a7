"""Vocabulary-parallel cross entropy that keeps the logits in their own dtype.

megatron-core 0.19.2's fused "native" cross entropy casts the ``[s, b, V/TP]`` logits to fp32 and saves the fp32
exponentials for the backward pass. With Qwen3.5's 248k vocabulary that is 4 bytes x V per token kept alive plus
several full passes over it: on the H200 bench (MBS 8 x 4096 tokens) five kernels took 96 ms of a 484 ms step and
32 GB of memory (``docs/benchmarks.md``). Here the forward pass reads the logits twice (row max, then the sum of
exponentials; fp32 only in registers) and saves the logits themselves (which the output layer does not keep) plus
one fp32 log-sum-exp per token; the backward pass is one elementwise kernel ``(softmax - onehot) * grad`` written in
the logits' dtype. On CUDA the reductions and the gradient are ``torch.compile``-d (one Triton kernel each); on the
CPU they run eagerly, with the same arithmetic.

Across tensor-parallel ranks each holds a contiguous slice of the vocabulary (megatron's layout): the row max is
all-reduced with MAX, the sum of exponentials and the target logit with one SUM.
:func:`cross_entropy_reference` is the float64 definition the tests compare against.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch
import torch.distributed as dist
from torch import Tensor


def _row_max(logits: Tensor) -> Tensor:
    """fp32 max over the local vocabulary slice."""
    return logits.amax(dim=-1).float()


def _sum_exp(logits: Tensor, row_max: Tensor) -> Tensor:
    """``sum_v exp(logit_v - row_max)`` in fp32 over the local slice."""
    return torch.exp(logits.float() - row_max.unsqueeze(-1)).sum(dim=-1)


def _logits_grad(logits: Tensor, log_sum_exp: Tensor, local_target: Tensor, grad_loss: Tensor) -> Tensor:
    """``(softmax - onehot(target)) * grad_loss`` in the logits' dtype; ``local_target`` is -1 where the target
    lies on another rank's slice (no onehot term here)."""
    probs = torch.exp(logits.float() - log_sum_exp.unsqueeze(-1))
    columns = torch.arange(logits.shape[-1], device=logits.device)
    onehot = (columns == local_target.unsqueeze(-1)).float()
    return ((probs - onehot) * grad_loss.unsqueeze(-1)).to(logits.dtype)


@cache
def _compiled(function: Callable) -> Callable:
    """``torch.compile`` of one of the kernels above, built on first CUDA use."""
    return torch.compile(function)


def _kernel(function: Callable, tensor: Tensor) -> Callable:
    """The compiled kernel for CUDA tensors, the eager function elsewhere."""
    return _compiled(function) if tensor.is_cuda else function


def _all_reduce(tensor: Tensor, op: dist.ReduceOp, group: dist.ProcessGroup | None) -> None:
    """In-place all-reduce over ``group``; nothing to do without one or with a single rank."""
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(tensor, op=op, group=group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token loss ``log_sum_exp - logit[target]`` over a vocabulary split across ``group``."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        rank = dist.get_rank(group) if group is not None and dist.get_world_size(group) > 1 else 0
        vocab_start = rank * logits.shape[-1]
        local_target = target - vocab_start
        on_this_rank = (local_target >= 0) & (local_target < logits.shape[-1])
        local_target = torch.where(on_this_rank, local_target, -1)

        row_max = _kernel(_row_max, logits)(logits)
        _all_reduce(row_max, dist.ReduceOp.MAX, group)
        target_logit = logits.gather(-1, local_target.clamp(min=0).unsqueeze(-1)).squeeze(-1).float()
        sums = torch.stack([_kernel(_sum_exp, logits)(logits, row_max), target_logit * on_this_rank])
        _all_reduce(sums, dist.ReduceOp.SUM, group)
        log_sum_exp = row_max + torch.log(sums[0])
        ctx.save_for_backward(logits, log_sum_exp, local_target)
        return log_sum_exp - sums[1]

    @staticmethod
    def backward(ctx, grad_loss: Tensor) -> tuple[Tensor, None, None]:
        logits, log_sum_exp, local_target = ctx.saved_tensors
        grad = _kernel(_logits_grad, logits)(logits, log_sum_exp, local_target, grad_loss.float())
        return grad, None, None


def vocab_parallel_cross_entropy(logits: Tensor, target: Tensor,
                                 group: dist.ProcessGroup | None = None) -> Tensor:
    """Per-token cross entropy (fp32, shape of ``target``) of ``logits`` ``[..., V/TP]`` (this rank's contiguous
    vocabulary slice, any float dtype) against global token ids ``target`` ``[...]``; differentiable in ``logits``.

    Same contract as megatron-core's ``fused_vocab_parallel_cross_entropy`` (which the models use in its place, see
    :mod:`megatron.oellm.models.language_model`), without an fp32 copy of the logits.
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and target {tuple(target.shape)} disagree on the token axes")
    if target.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"target must hold integer token ids, got {target.dtype}")
    return _VocabParallelCrossEntropy.apply(logits, target, group)


def cross_entropy_reference(logits: Tensor, target: Tensor) -> Tensor:
    """The definition, in float64 over the full vocabulary: ``logsumexp(logits) - logits[target]`` per token."""
    logits = logits.double()
    return torch.logsumexp(logits, dim=-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
