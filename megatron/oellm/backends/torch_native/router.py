"""MoE router whose gating product is computed by torch, so the torch-native backend never reaches Transformer Engine.

megatron-core 0.19.2's ``TopKRouter`` computes its logits (and their gradients) with Transformer Engine's general
GEMM whenever ``transformer_engine`` imports, whatever backend built the layer. TE asks cuBLAS for TF32 on fp32
operands and ignores torch's TF32 switch, so on a machine with TE a torch-native fp32 router is TF32-rounded (router
probabilities moved by up to 5e-5 on an H200, every module before the router bit-identical; docs/benchmarks.md,
session 12), and the same model routes differently with and without TE installed. :class:`TorchGatingTopKRouter`
keeps megatron-core's routing and replaces only the gating product.
"""

from __future__ import annotations

import torch
from megatron.core.transformer.moe.router import TopKRouter

ROUTER_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}
"""``TransformerConfig.moe_router_dtype`` values and the dtype the gating product is computed in (None: the input's)."""


class GatingProduct(torch.autograd.Function):
    """``hidden @ weight.T (+ bias)`` computed in ``dtype``, with torch's matmuls.

    Only the tensors as given are kept for the backward pass (a bf16 activation stays bf16 in memory); each pass
    casts them to ``dtype`` in temporaries (an fp32 router on bf16 activations: one ``[tokens, hidden]`` fp32 copy
    at a time) and the backward pass returns each gradient in its input's dtype.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
        ctx.save_for_backward(hidden, weight)
        ctx.dtype = dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        rows = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
        logits = rows @ weight.to(dtype).t()
        if bias is not None:
            logits = logits + bias.to(dtype)
        return logits.view(*hidden.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_logits: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight = ctx.saved_tensors
        grad = grad_logits.reshape(-1, grad_logits.shape[-1]).to(ctx.dtype)
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad @ weight.to(ctx.dtype)).to(hidden.dtype).view(hidden.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = (grad.t() @ hidden.reshape(-1, hidden.shape[-1]).to(ctx.dtype)).to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0).to(ctx.bias_dtype)
        return grad_hidden, grad_weight, grad_bias, None


def gating_product(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   dtype: torch.dtype) -> torch.Tensor:
    """Router logits ``hidden @ weight.T (+ bias)`` in ``dtype`` (see :class:`GatingProduct`)."""
    return GatingProduct.apply(hidden, weight, bias, dtype)


class TorchGatingTopKRouter(TopKRouter):
    """megatron-core's ``TopKRouter`` with the gating product computed by torch (see the module docstring).

    Routing (score function, top-k, group-limited routing, expert bias, auxiliary losses) is megatron-core's; the
    logits are the same product in the same dtype (``moe_router_dtype``, else the input's), honouring torch's TF32
    switch, with or without Transformer Engine installed.
    """

    def gating(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (megatron-core's parameter name)
        """Router logits of ``input`` (``[..., hidden]`` -> ``[..., num_experts]``). A router whose parameters were
        left on the CPU (megatron-core allows it) has them moved to the input's GPU first, as megatron-core's does."""
        if input.is_cuda:
            for parameter in (self.weight, self.bias):
                if parameter is not None and not parameter.is_cuda:
                    parameter.data = parameter.data.to(input.device)
        dtype = ROUTER_DTYPES.get(self.config.moe_router_dtype, input.dtype)
        return gating_product(input, self.weight, self.bias, dtype)
