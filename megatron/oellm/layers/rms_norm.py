"""RMSNorm with fp32 arithmetic and the input's dtype in memory, optionally with a zero-centred gamma.

Written eagerly, the fp32 arithmetic costs about ten element-wise kernels per call (cast, square, mean, rsqrt, two
products, cast back) and autograd keeps fp32 copies of the input and of the normalised values for the backward pass.
On CUDA (or under ``TRITON_INTERPRET=1``) :func:`rms_norm` runs the Triton kernels of
:mod:`megatron.oellm.layers.rms_norm_kernels` instead: one read of the input and one write of the output forward,
one pass backward, with the input and an fp32 ``rstd`` per row saved. :func:`rms_norm_eager` is the same arithmetic
in torch (used on the CPU, for rows wider than the kernels take, and with ``OELLM_EAGER_RMS_NORM=1`` for A/B
runs); :func:`rms_norm_reference` is the float64 definition the tests compare both against.
"""

from __future__ import annotations

import torch
from torch import Tensor

from megatron.oellm import switches
from megatron.oellm.layers.triton_launch import on_device, runs_on

MAX_COLUMNS = 16384
"""Widest row the kernels take in one block of registers; wider norms take the eager path."""
EAGER_ENV = switches.EAGER_RMS_NORM
"""Set to ``1`` to run :func:`rms_norm_eager` on CUDA too (A/B measurements, debugging)."""


def rms_norm_eager(x: Tensor, weight: Tensor, eps: float, zero_centered_gamma: bool) -> Tensor:
    """Normalise ``x`` over its last dimension by its root mean square, scale by gamma, return in ``x.dtype``.

    Computed in fp32 whatever the input dtype, like Transformer Engine. With ``zero_centered_gamma`` the stored
    weight holds ``gamma - 1`` (so weight decay pulls gamma towards 1), and the scale applied is ``1 + weight``.
    """
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    gamma = weight.float() + 1.0 if zero_centered_gamma else weight.float()
    return (normed * gamma).to(x.dtype)


def rms_norm_reference(x: Tensor, weight: Tensor, eps: float, zero_centered_gamma: bool) -> Tensor:
    """The definition in float64 (returned in float64): ``x / sqrt(mean(x**2) + eps) * gamma``."""
    x64 = x.double()
    gamma = weight.double() + (1.0 if zero_centered_gamma else 0.0)
    return x64 / torch.sqrt(x64.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma


class _FusedRMSNorm(torch.autograd.Function):
    """:func:`rms_norm_eager`'s result through the Triton kernels; saves the input rows and one fp32 rstd per row.
    First order only: a second derivative through it raises."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float, shift: float) -> Tensor:
        from megatron.oellm.layers import rms_norm_kernels

        rows = x.reshape(-1, x.shape[-1]).contiguous()
        with on_device(rows):
            y, rstd = rms_norm_kernels.forward(rows, weight.contiguous(), eps, shift)
        ctx.save_for_backward(rows, weight, rstd)
        ctx.shift = shift
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, grad_y: Tensor) -> tuple[Tensor, Tensor | None, None, None]:
        from megatron.oellm.layers import rms_norm_kernels

        if torch.is_grad_enabled():  # create_graph=True: the kernels' gradient would be a constant of the new graph
            raise RuntimeError("the RMSNorm kernels' backward is first order: for a second derivative "
                               f"(create_graph=True) set {EAGER_ENV}=1")
        rows, weight, rstd = ctx.saved_tensors
        grad_rows = grad_y.reshape(rows.shape).contiguous()
        weight_grad = ctx.needs_input_grad[1]
        with on_device(rows):
            grad_x, grad_weight = rms_norm_kernels.backward(grad_rows, rows, weight.contiguous(), rstd, ctx.shift,
                                                            weight_grad)
        return grad_x.view(grad_y.shape), grad_weight.to(weight.dtype) if weight_grad else None, None, None


def cuda_path() -> str:
    """The path :func:`rms_norm` takes for CUDA tensors of rows up to :data:`MAX_COLUMNS` wide in this process, for
    run logs: ``"triton"``, or ``"eager"`` with ``OELLM_EAGER_RMS_NORM=1``."""
    return "eager" if switches.is_on(EAGER_ENV) else "triton"


def _use_kernels(x: Tensor) -> bool:
    """Whether :func:`rms_norm` takes the Triton kernels for ``x`` (see the module docstring)."""
    if cuda_path() == "eager" or x.numel() == 0 or x.shape[-1] > MAX_COLUMNS:
        return False
    return runs_on(x)


def rms_norm(x: Tensor, weight: Tensor, eps: float, zero_centered_gamma: bool) -> Tensor:
    """RMSNorm of ``x`` over its last dimension with gamma ``weight`` (``1 + weight`` if ``zero_centered_gamma``),
    fp32 arithmetic, result in ``x.dtype``; differentiable (first order on the kernels' path) in ``x`` and ``weight``.
    Same result as :func:`rms_norm_eager` up to fp32 rounding, with the Triton kernels where they apply."""
    if x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"RMSNorm over {x.shape[-1]} features got a weight of {weight.shape[-1]}")
    if not _use_kernels(x):
        return rms_norm_eager(x, weight, eps, zero_centered_gamma)
    return _FusedRMSNorm.apply(x, weight, eps, 1.0 if zero_centered_gamma else 0.0)
