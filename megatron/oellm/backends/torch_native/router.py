"""MoE router whose gating product is computed by torch, so the torch-native backend never reaches Transformer Engine.

megatron-core 0.19.2's ``TopKRouter`` computes its logits (and their gradients) with Transformer Engine's general
GEMM whenever ``transformer_engine`` imports, whatever backend built the layer. TE asks cuBLAS for TF32 on fp32
operands and ignores torch's TF32 switch, so on a machine with TE a torch-native fp32 router is TF32-rounded (router
probabilities moved by up to 5e-5 on an H200, every module before the router bit-identical; docs/benchmarks.md,
session 12), and the same model routes differently with and without TE installed. :class:`TorchGatingTopKRouter`
keeps megatron-core's routing and replaces only the gating product.

An fp32 router on bf16 activations and weights (the production case: ``moe_router_dtype="fp32"``, bf16 parameters)
computes its three GEMMs on the GPU's tensor cores as exact bf16 products accumulated in fp32
(:mod:`megatron.oellm.layers.fp32_products`), not as fp32 GEMMs on upcast copies, which without TF32 run on the
CUDA cores; ``OELLM_FP32_OPERAND_ROUTER=1`` keeps the upcast copies (A/B runs).
"""

from __future__ import annotations

import torch
from megatron.core.transformer.moe.router import TopKRouter

from megatron.oellm import switches
from megatron.oellm.layers.fp32_products import bf16_matmul_in_fp32, bf16_terms_matmul, split_into_bf16_terms

ROUTER_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}
"""``TransformerConfig.moe_router_dtype`` values and the dtype the gating product is computed in (None: the input's)."""


def router_gemm_path(router_dtype: str | None, params_dtype: torch.dtype) -> str:
    """How the torch-native router computes its gating GEMMs on a GPU in this process, for run logs: ``"tensor
    cores"`` for an fp32 router of bf16 parameters (``"fp32 copies"`` with ``OELLM_FP32_OPERAND_ROUTER=1``), else the
    dtype it computes in (``moe_router_dtype``, else the parameters')."""
    dtype = ROUTER_DTYPES.get(router_dtype, params_dtype)
    if dtype == torch.float32 and params_dtype == torch.bfloat16:
        return "fp32 copies" if switches.is_on(switches.FP32_OPERAND_ROUTER) else "tensor cores"
    return {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def uses_bf16_tensor_cores(hidden: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the gating product runs as exact bf16 products accumulated in fp32: an fp32 product of bf16 operands
    on a GPU, unless ``OELLM_FP32_OPERAND_ROUTER=1``."""
    return (dtype == torch.float32 and hidden.dtype == weight.dtype == torch.bfloat16 and hidden.is_cuda
            and not switches.is_on(switches.FP32_OPERAND_ROUTER))


def upcast_matmul(left: torch.Tensor, right: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``left @ right`` with ``right`` cast to ``dtype``, the dtype ``left`` is already in."""
    return left @ right.to(dtype)


class GatingProduct(torch.autograd.Function):
    """``hidden @ weight.T (+ bias)`` computed in ``dtype``, with torch's matmuls.

    Only the tensors as given are kept for the backward pass (a bf16 activation stays bf16 in memory). Where
    :func:`uses_bf16_tensor_cores` holds, each GEMM takes the bf16 operands as they are (the fp32 gradient split once
    into exact bf16 terms, which both gradient GEMMs take); otherwise each pass casts them to ``dtype`` in
    temporaries (an fp32 router on bf16 activations: one ``[tokens, hidden]`` fp32 copy at a time). The backward
    pass returns each gradient in its input's dtype.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
        """``hidden @ weight.T (+ bias)`` in ``dtype``; keeps the operands, not a ``dtype`` copy, for the backward."""
        ctx.save_for_backward(hidden, weight)
        ctx.dtype = dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.tensor_cores = uses_bf16_tensor_cores(hidden, weight, dtype)
        rows = hidden.reshape(-1, hidden.shape[-1])
        if ctx.tensor_cores:
            logits = bf16_matmul_in_fp32(rows, weight.t())
        else:
            logits = rows.to(dtype) @ weight.to(dtype).t()
        if bias is not None:
            logits = logits + bias.to(dtype)
        return logits.view(*hidden.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_logits: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients of ``hidden``, ``weight`` and ``bias`` in their own dtypes, computed in the forward's dtype."""
        hidden, weight = ctx.saved_tensors
        grad = grad_logits.reshape(-1, grad_logits.shape[-1]).to(ctx.dtype)
        rows = hidden.reshape(-1, hidden.shape[-1])
        grad_hidden = grad_weight = grad_bias = None
        # one exact split serves both products, made only when one of them is needed
        split = ctx.tensor_cores and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1])
        terms = split_into_bf16_terms(grad) if split else None

        def grad_times(right: torch.Tensor, transposed: bool) -> torch.Tensor:
            """``grad`` (or its transpose) times ``right`` in fp32: from the bf16 terms on the tensor cores, else
            on fp32 copies."""
            if terms is None:
                return upcast_matmul(grad.t() if transposed else grad, right, ctx.dtype)
            return bf16_terms_matmul(tuple(term.t() for term in terms) if transposed else terms, right)

        if ctx.needs_input_grad[0]:
            grad_hidden = grad_times(weight, transposed=False).to(hidden.dtype).view(hidden.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_times(rows, transposed=True).to(weight.dtype)
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
