"""Vocabulary-parallel cross entropy that keeps the logits in their own dtype.

megatron-core 0.19.2's fused "native" cross entropy casts the ``[s, b, V/TP]`` logits to fp32 and saves the fp32
exponentials for the backward pass. With Qwen3.5's 248k vocabulary that is 4 bytes x V per token kept alive plus
several full passes over it: on the H200 bench (MBS 8 x 4096 tokens) five kernels took 96 ms of a 484 ms step and
32 GB of memory (``docs/benchmarks.md``). Here the forward pass reads the logits once (per-row log-sum-exp by the
running-max rule, and the target logit; fp32 only in registers) and saves the logits themselves (which the output
layer does not keep) plus two fp32 numbers per token, the row's max and the log-sum-exp relative to it (kept apart so
that large logits lose no precision to their sum); the backward pass writes ``(softmax - onehot) * grad`` in
the logits' dtype in one pass. On CUDA (or under ``TRITON_INTERPRET=1``) both are the Triton kernels of
:mod:`megatron.oellm.layers.cross_entropy_kernels`; elsewhere the eager functions below, with the same arithmetic.

Across tensor-parallel ranks each holds a contiguous slice of the vocabulary (megatron's layout): the per-rank
maxima and sums are combined with one MAX and one SUM all-reduce (the target logit rides in the SUM).
:func:`cross_entropy_reference` is the float64 definition the tests compare against.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core.utils import get_pg_rank, get_pg_size
from torch import Tensor

from megatron.oellm.layers.triton_launch import on_device, runs_on


def _row_stats_eager(logits: Tensor, local_target: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """fp32 ``(row_max, log_sum, target_logit)`` per row of ``logits`` ``[rows, vocab]``: the max ``m``,
    ``log(sum(exp(x - m)))`` (the exponentials relative to 0 in a row of -inf) and ``x[target]`` (0 for target -1)."""
    x = logits.float()
    row_max = x.amax(dim=-1)
    shift = torch.where(row_max == float("-inf"), 0.0, row_max)
    log_sum = torch.exp(x - shift.unsqueeze(-1)).sum(dim=-1).log()
    target_logit = x.gather(-1, local_target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return row_max, log_sum, torch.where(local_target >= 0, target_logit, 0.0)


def _logits_grad_eager(logits: Tensor, row_max: Tensor, log_sum: Tensor, local_target: Tensor,
                       grad_loss: Tensor) -> Tensor:
    """``(softmax - onehot(target)) * grad_loss`` in the logits' dtype (no onehot term where the target is -1), the
    softmax as ``exp((x - row_max) - log_sum)``."""
    probs = torch.exp((logits.float() - row_max.unsqueeze(-1)) - log_sum.unsqueeze(-1))
    columns = torch.arange(logits.shape[-1], device=logits.device)
    onehot = (columns == local_target.unsqueeze(-1)).float()
    return ((probs - onehot) * grad_loss.unsqueeze(-1)).to(logits.dtype)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token loss ``log_sum_exp - logit[target]`` over a vocabulary split across ``group``."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        rank, size = get_pg_rank(group), get_pg_size(group)  # (0, 1) without a group
        vocab = logits.shape[-1]
        rows = logits.reshape(-1, vocab).contiguous()
        local_target = target.reshape(-1).long() - rank * vocab
        local_target = torch.where((local_target >= 0) & (local_target < vocab), local_target, -1)
        if runs_on(rows):
            from megatron.oellm.layers.cross_entropy_kernels import row_stats
        else:
            row_stats = _row_stats_eager
        with on_device(rows):  # Triton launches on the current GPU, which need not be the logits'
            row_max, log_sum, target_logit = row_stats(rows, local_target)
        if size > 1:
            global_max = row_max.clone()
            dist.all_reduce(global_max, op=dist.ReduceOp.MAX, group=group)
            sums = torch.stack([torch.exp(log_sum + (row_max - global_max)), target_logit])
            dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
            row_max, log_sum, target_logit = global_max, torch.log(sums[0]), sums[1]
        # The log-sum-exp stays split as row_max + log_sum: the target logit is taken from the max before the sum,
        # so large logits (1e4 in fp32) do not leave the loss and the softmax a rounding step of 1e-3 off.
        ctx.save_for_backward(rows, row_max, log_sum, local_target)
        ctx.logits_shape = logits.shape
        return (log_sum - (target_logit - row_max)).view(target.shape)

    @staticmethod
    def backward(ctx, grad_loss: Tensor) -> tuple[Tensor, None, None]:
        rows, row_max, log_sum, local_target = ctx.saved_tensors
        grad_rows = grad_loss.reshape(-1).float().contiguous()
        if runs_on(rows):
            from megatron.oellm.layers.cross_entropy_kernels import logits_grad
        else:
            logits_grad = _logits_grad_eager
        with on_device(rows):
            grad_logits = logits_grad(rows, row_max, log_sum, local_target, grad_rows)
        return grad_logits.view(ctx.logits_shape), None, None


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
