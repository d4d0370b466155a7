"""Core attention on torch's fused kernels: SDPA for [s, b, h, d] batches, varlen flash attention for packed docs."""

import contextlib
import functools
import inspect
import math

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # torch < 2.10
    varlen_attn = None

_CAUSAL_MASKS = (AttnMaskType.causal, AttnMaskType.padding_causal)
_UNMASKED = (AttnMaskType.no_mask, AttnMaskType.padding)
_VARLEN_DTYPES = (torch.bfloat16, torch.float16)


@functools.cache
def _varlen_parameters() -> frozenset[str]:
    """Keyword parameters of this torch's ``varlen_attn`` (its signature changed between releases)."""
    return frozenset(inspect.signature(varlen_attn).parameters) if varlen_attn is not None else frozenset()


def packed_document_mask(cu_seqlens: torch.Tensor, total: int, causal: bool) -> torch.Tensor:
    """Boolean ``[total, total]`` mask (True = may attend) keeping every token inside its own packed document.

    Built on the device from ``cu_seqlens`` (no host sync); tokens past ``cu_seqlens[-1]`` form one trailing
    document. Used for packed fp32 attention, where no varlen kernel exists.
    """
    positions = torch.arange(total, device=cu_seqlens.device)
    doc = torch.searchsorted(cu_seqlens[1:].to(positions.dtype), positions, right=True)
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= positions[:, None] >= positions[None, :]
    return mask


class SDPACoreAttention(MegatronModule):
    """Megatron core attention on ``torch.nn.functional.scaled_dot_product_attention`` and ``varlen_attn``.

    Same constructor and forward signature as megatron's DotProductAttention / TEDotProductAttention. It has no
    parameters and no state, so it adds nothing to a distributed checkpoint, as TEDotProductAttention adds nothing
    with the vanilla softmax (its softmax offset only under ``softmax_type='learnable'``, refused here). Layout: query
    ``[sq, b, np, hn]``,
    key/value ``[sk, b, ng, hn]`` with ``np % ng == 0`` (GQA), output ``[sq, b, np * hn]``. Packed sequences
    (``packed_seq_params.qkv_format == 'thd'``): ``[t, np, hn]`` in, ``[t, np * hn]`` out, documents delimited by
    ``cu_seqlens_*_padded`` when given, else ``cu_seqlens_*``; a document's padding follows its tokens, so causal
    attention over padded documents is exact for the real tokens, while unmasked attention over padded documents
    (which would attend to the padding) raises. bf16/fp16 packed attention runs on
    ``torch.nn.attention.varlen.varlen_attn`` (flash attention); fp32 has no varlen kernel, so it runs SDPA with a
    block-diagonal document mask built on the device (quadratic memory in the pack length: for tests and small
    packs). Rows past the last document (``cu_seqlens_q*[-1]`` up to ``t``: padding at the end of a pack) come out
    zero in every dtype, and the gradients of query/key/value rows outside every document are zero (the varlen
    kernel writes neither). Packed attention has no dropout: a config with ``attention_dropout > 0`` is refused at
    the first packed forward, in training and evaluation alike (packing is known only from ``packed_seq_params``).
    Masks: causal (an ``attention_mask`` tensor is then ignored: the causal mask is implied) and none
    (``padding`` without a mask tensor); explicit padding masks, attention bias, sliding windows, context
    parallelism, softmax offsets (``softmax_type`` other than vanilla) and the max-logit record of ``qk_clip`` /
    ``log_max_attention_logit`` raise.
    """

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        k_channels: int | None = None,
        v_channels: int | None = None,
        cp_comm_type: str | None = None,
        pg_collection: ProcessGroupCollection | None = None,
    ):
        super().__init__(config=config)
        if config.context_parallel_size > 1:
            raise ValueError(
                "the torch-native core attention does not implement context parallelism; "
                "set context_parallel_size=1 or use the Transformer Engine backend (--oellm-backend te)"
            )
        if config.window_size is not None:
            raise ValueError(
                "the torch-native core attention does not implement sliding-window attention; "
                "unset window_size or use the Transformer Engine backend (--oellm-backend te)"
            )
        if config.softmax_type != "vanilla":
            raise ValueError(
                "the torch-native core attention implements the vanilla softmax only, got "
                f"softmax_type={config.softmax_type!r}; unset it or use the Transformer Engine backend "
                "(--oellm-backend te)"
            )
        if config.qk_clip or config.log_max_attention_logit:
            raise ValueError(
                "the torch-native core attention does not record the max attention logits that qk_clip and "
                "log_max_attention_logit read; unset them or use the Transformer Engine backend (--oellm-backend te)"
            )
        self.layer_number = layer_number
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type
        self.softmax_scale = softmax_scale
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: PackedSeqParams | None = None,
    ) -> torch.Tensor:
        """Softmax attention of ``query`` over ``key``/``value``; see the class docstring for layouts."""
        if attention_bias is not None:
            raise ValueError("the torch-native core attention does not take an attention_bias; use --oellm-backend te")
        mask_type = self.attn_mask_type if attn_mask_type is None else attn_mask_type
        if mask_type not in _CAUSAL_MASKS + _UNMASKED:
            raise ValueError(f"the torch-native core attention supports causal or unmasked attention, got {mask_type}")
        packed = packed_seq_params is not None and packed_seq_params.qkv_format == "thd"
        if packed and self.dropout_p > 0.0:
            raise ValueError(
                f"attention_dropout={self.dropout_p} is set, but the torch-native core attention cannot apply "
                "attention dropout to packed sequences (packed_seq_params with qkv_format='thd'), so it refuses them "
                "in training and evaluation alike; set attention_dropout=0 (--attention-dropout 0) or use the "
                "Transformer Engine backend (--oellm-backend te)"
            )
        if attention_mask is not None and mask_type != AttnMaskType.causal and not packed:
            raise ValueError(
                f"the torch-native core attention does not apply explicit attention_mask tensors ({mask_type}); "
                "use the causal mask type or packed sequences (packed_seq_params) for document masking"
            )
        causal = mask_type in _CAUSAL_MASKS
        scale = self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(query.shape[-1])
        dropout_p = self.dropout_p if self.training else 0.0
        if packed:
            return self._packed(query, key, value, packed_seq_params, causal, scale)
        with self._dropout_rng(dropout_p):
            return self._batched(query, key, value, causal, scale, dropout_p)

    def _dropout_rng(self, dropout_p: float) -> contextlib.AbstractContextManager:
        """The generator attention dropout draws from, chosen as megatron's DotProductAttention chooses it: the
        model-parallel RNG tracker's (seeded per tensor-parallel rank, so each rank's heads get their own masks),
        except under sequence parallelism, where megatron leaves it on torch's default generator."""
        if dropout_p == 0.0 or self.config.sequence_parallel:
            return contextlib.nullcontext()
        return tensor_parallel.get_cuda_rng_tracker().fork()

    @staticmethod
    def _batched(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool, scale: float, dropout_p: float
    ) -> torch.Tensor:
        """``[s, b, h, d]`` attention through SDPA; returns ``[sq, b, np * hn]``."""
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
        sq, b = query.shape[0], query.shape[1]
        return out.permute(2, 0, 1, 3).reshape(sq, b, -1)

    @staticmethod
    def _packed(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        params: PackedSeqParams,
        causal: bool,
        scale: float,
    ) -> torch.Tensor:
        """Packed ``[t, h, d]`` attention, each document attending only to itself; returns ``[t, np * hn]``, zero in
        the rows past the last document."""
        q, k, v = (t.squeeze(1) if t.dim() == 4 else t for t in (query, key, value))
        cu_q = params.cu_seqlens_q_padded if params.cu_seqlens_q_padded is not None else params.cu_seqlens_q
        cu_kv = params.cu_seqlens_kv_padded if params.cu_seqlens_kv_padded is not None else params.cu_seqlens_kv
        if cu_q is None or cu_kv is None:
            raise ValueError("packed (thd) attention needs packed_seq_params.cu_seqlens_q and cu_seqlens_kv")
        if not causal and (
            _pads_documents(params.cu_seqlens_q_padded, params.cu_seqlens_q)
            or _pads_documents(params.cu_seqlens_kv_padded, params.cu_seqlens_kv)
        ):
            raise ValueError(
                "the torch-native packed attention without a causal mask cannot leave out the padding of padded "
                "documents (cu_seqlens_*_padded differ from cu_seqlens_*): every token would attend to it; use a "
                "causal mask type, pack without padding, or use --oellm-backend te"
            )
        gqa = q.shape[1] != k.shape[1]
        past_q, past_kv = rows_past(q, cu_q[-1]), rows_past(k, cu_kv[-1])
        q = GradientRowsZeroed.apply(q, past_q)
        k, v = (GradientRowsZeroed.apply(t, past_kv) for t in (k, v))
        if q.dtype not in _VARLEN_DTYPES:
            mask = packed_document_mask(cu_q, q.shape[0], causal)
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=scale, enable_gqa=gqa
            ).transpose(0, 1)
        else:
            out = _varlen(q, k, v, cu_q, cu_kv, params, causal, scale, gqa)
        return out.masked_fill(past_q, 0.0).reshape(q.shape[0], -1)


def rows_past(t: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """Boolean ``[rows, 1, ...]`` mask (broadcastable to ``t``) of the rows of ``t`` at or after index ``end``.

    ``end`` is the last ``cu_seqlens`` entry, a one-element tensor: the comparison runs on ``t``'s device, so finding
    the padding rows at the end of a pack takes no host sync.
    """
    rows = torch.arange(t.shape[0], device=t.device)
    return (rows >= end.to(t.device)).view(-1, *([1] * (t.dim() - 1)))


class GradientRowsZeroed(torch.autograd.Function):
    """Identity in the forward pass; the backward pass sets the gradient rows selected by ``rows`` to zero.

    Flash attention's varlen backward leaves the query/key/value gradient rows outside every document unwritten
    (uninitialised memory, possibly NaN), and those rows reach the QKV projection's weight gradient. Their true
    gradient is zero (the output does not depend on them); ``masked_fill`` replaces NaN too, where a multiply would
    not. The forward returns a view, so no activation is copied.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``t`` unchanged (a view); ``rows`` is a boolean mask broadcastable to ``t``."""
        ctx.save_for_backward(rows)
        return t.view_as(t)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``grad`` with the masked rows set to zero; no gradient for the mask."""
        (rows,) = ctx.saved_tensors
        return grad.masked_fill(rows, 0.0), None


def _pads_documents(padded: torch.Tensor | None, actual: torch.Tensor | None) -> bool:
    """Whether the ``padded`` document boundaries add padding tokens to the ``actual`` ones (a host sync, taken only
    for unmasked packed attention)."""
    if padded is None or actual is None or padded is actual:
        return False
    return not torch.equal(padded, actual.to(device=padded.device, dtype=padded.dtype))


def _varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_kv: torch.Tensor,
    params: PackedSeqParams,
    causal: bool,
    scale: float,
    gqa: bool,
) -> torch.Tensor:
    """Call ``varlen_attn`` across the keyword sets torch releases have used (causal flag, scale, GQA); returns
    ``[t, np, hn]`` with the rows outside every document unwritten (uninitialised).

    torch 2.11's ``varlen_attn`` takes ``window_size`` and ``scale`` but no ``enable_gqa``, so there key/value
    heads are repeated to the query heads; later releases share them in the kernel.
    """
    accepted = _varlen_parameters()
    if varlen_attn is None:
        raise RuntimeError(
            "packed-sequence attention on the torch-native backend needs torch.nn.attention.varlen.varlen_attn "
            f"(torch >= 2.10); this torch is {torch.__version__}. Upgrade torch or use --oellm-backend te"
        )
    max_q, max_k = params.max_seqlen_q, params.max_seqlen_kv
    if max_q is None or max_k is None:
        lengths_q, lengths_k = cu_q.diff(), cu_kv.diff()
        max_q, max_k = int(lengths_q.max()), int(lengths_k.max())  # one host sync when the caller gave no maxima
    kwargs = {}
    if "window_size" in accepted:
        kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
    elif "is_causal" in accepted:
        kwargs["is_causal"] = causal
    elif causal:
        raise RuntimeError(f"torch {torch.__version__}'s varlen_attn takes no causal flag; use --oellm-backend te")
    if "scale" in accepted:
        kwargs["scale"] = scale
    else:
        q = q * (scale * math.sqrt(q.shape[-1]))  # the kernel applies 1/sqrt(d) itself
    if gqa and "enable_gqa" in accepted:
        kwargs["enable_gqa"] = True
    elif gqa:
        repeats = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
    return varlen_attn(q, k, v, cu_q.to(torch.int32), cu_kv.to(torch.int32), int(max_q), int(max_k), **kwargs)
