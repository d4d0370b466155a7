"""Torch-native packed (thd) attention on CPU: the rows past the last document (padding at the end of a pack) come
out zero with zero gradients, and attention dropout is refused at the first packed forward, in evaluation too.
The bf16 varlen path runs here on a stand-in for flash attention's kernel that leaves those rows NaN, as the kernel
leaves them unwritten; ``test_torch_native_packed_tail_rows_gpu.py`` runs the kernel."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from backend_references import packed_attention_reference, relative_error
from backend_setup import moe_config
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType

from megatron.oellm.backends.torch_native import attention as attention_module
from megatron.oellm.backends.torch_native.attention import GradientRowsZeroed, SDPACoreAttention, rows_past
from tests.unit_tests.models.hf_reference import fresh_seed

HQ, HKV, D = 4, 2, 8
BF16_BOUND = 2e-2
"""Max deviation relative to the reference's largest magnitude for bf16 (a masking or scaling bug gives O(1))."""


@pytest.fixture
def generator() -> torch.Generator:
    """A CPU generator on a fresh seed (printed; the session's ``OELLM_TEST_SEED`` replays it)."""
    return torch.Generator().manual_seed(fresh_seed())


def _attention(causal: bool, dtype: torch.dtype = torch.float32, **overrides) -> SDPACoreAttention:
    """Core attention of a CPU config with HQ query heads of D channels in HKV groups."""
    config = moe_config(HQ * D, HQ, 4, 16, use_cpu_initialization=True, params_dtype=dtype, **overrides)
    mask = AttnMaskType.padding_causal if causal else AttnMaskType.padding
    return SDPACoreAttention(config, layer_number=1, attn_mask_type=mask, attention_type="self")


def _pack_with_tail(generator: torch.Generator) -> tuple[list[int], int, PackedSeqParams]:
    """Random document lengths, a random number (>= 1) of padding rows after the last one, and the pack's params."""
    lengths = torch.randint(1, 12, (int(torch.randint(2, 5, (1,), generator=generator)),), generator=generator)
    lengths = lengths.tolist()
    tail = int(torch.randint(1, 7, (1,), generator=generator))
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths),
                             max_seqlen_kv=max(lengths))
    return lengths, tail, params


def _qkv(total: int, dtype: torch.dtype, generator: torch.Generator) -> list[torch.Tensor]:
    """Random ``[total, h, D]`` query (HQ heads) and key/value (HKV heads) leaves in ``dtype``."""
    shapes = [(total, HQ, D), (total, HKV, D), (total, HKV, D)]
    return [torch.randn(shape, generator=generator).to(dtype).requires_grad_() for shape in shapes]


def _packed_forward(attention: torch.nn.Module, generator: torch.Generator) -> torch.Tensor:
    """``attention`` over fresh random fp32 query, key and value of documents packed with tail rows."""
    lengths, tail, params = _pack_with_tail(generator)
    q, k, v = _qkv(sum(lengths) + tail, torch.float32, generator)
    return attention(q, k, v, None, packed_seq_params=params)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_packed_attention_refuses_attention_dropout_in_training_and_evaluation(
    generator: torch.Generator, training: bool
) -> None:
    """Packing is known only from ``packed_seq_params`` (the config has no field for it), so the refusal comes at
    the first packed forward; before the fix an evaluation forward ran and training stopped later, at its first
    training step."""
    dropout = float(torch.empty(1).uniform_(0.05, 0.5, generator=generator))
    attention = _attention(causal=True, attention_dropout=dropout).train(training)
    with pytest.raises(ValueError, match=rf"attention_dropout={dropout}.*packed sequences.*--oellm-backend te"):
        _packed_forward(attention, generator)


def test_packed_attention_refuses_even_a_tiny_attention_dropout(generator: torch.Generator) -> None:
    """Any positive dropout is refused, not only a large one: a small one would otherwise be dropped without a word
    (drawn log-uniformly from 1e-6 to 1e-2)."""
    dropout = float(10 ** torch.empty(1).uniform_(-6, -2, generator=generator))
    attention = _attention(causal=True, attention_dropout=dropout).train()
    with pytest.raises(ValueError, match=rf"attention_dropout={dropout} "):
        _packed_forward(attention, generator)


def test_rows_past_marks_the_rows_from_the_last_document_end(generator: torch.Generator) -> None:
    rows = int(torch.randint(1, 40, (1,), generator=generator))
    end = int(torch.randint(0, rows + 1, (1,), generator=generator))
    t = torch.randn(rows, 3, 5, generator=generator)
    mask = rows_past(t, torch.tensor([0, end], dtype=torch.int32)[-1])
    assert mask.shape == (rows, 1, 1) and mask.dtype == torch.bool
    assert mask.flatten().tolist() == [i >= end for i in range(rows)]


def test_gradient_rows_zeroed_is_the_identity_forward_and_zeroes_nan_gradient_rows(generator: torch.Generator) -> None:
    """The stand-in for an unwritten gradient is NaN: a multiply by a 0/1 mask would keep it."""
    rows = int(torch.randint(4, 30, (1,), generator=generator))
    end = int(torch.randint(1, rows, (1,), generator=generator))
    x = torch.randn(rows, 2, 3, generator=generator, requires_grad=True)
    mask = rows_past(x, torch.tensor(end))
    y = GradientRowsZeroed.apply(x, mask)
    assert torch.equal(y, x) and y.data_ptr() == x.data_ptr()  # no copy of the activation
    upstream = torch.randn(rows, 2, 3, generator=generator)
    upstream[end:] = float("nan")
    y.backward(upstream)
    assert torch.equal(x.grad[:end], upstream[:end])
    assert torch.equal(x.grad[end:], torch.zeros_like(x.grad[end:]))


def test_packed_fp32_attention_zeroes_the_rows_past_the_last_document(generator: torch.Generator) -> None:
    """The fp32 path (SDPA with a document mask) gives the padding rows the same zero values and gradients as the
    varlen path; before, they attended among themselves as one trailing document."""
    lengths, tail, params = _pack_with_tail(generator)
    real, total = sum(lengths), sum(lengths) + tail
    q, k, v = _qkv(total, torch.float32, generator)
    out = _attention(causal=True)(q, k, v, None, packed_seq_params=params)
    upstream = torch.randn(total, HQ * D, generator=generator)
    out.backward(upstream)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = packed_attention_reference(*(t[:real] for t in exact), lengths, causal=True)
    expected.backward(upstream[:real].double())
    assert torch.equal(out[real:], torch.zeros(tail, HQ * D))
    assert relative_error(out[:real], expected) < 1e-5
    for leaf, reference in zip((q, k, v), exact, strict=True):
        assert torch.equal(leaf.grad[real:], torch.zeros_like(leaf.grad[real:]))
        assert relative_error(leaf.grad, reference.grad) < 1e-5


def _nan_past(rows: int, end: int, like: torch.Tensor) -> torch.Tensor:
    """``like`` with the rows from ``end`` on set to NaN."""
    return like.masked_fill(torch.arange(rows)[:, None, None] >= end, float("nan"))


class _UnwrittenGradientRows(torch.autograd.Function):
    """Identity forward whose backward sets the gradient rows from ``end`` on to NaN, as flash attention's varlen
    backward leaves the dq/dk/dv rows outside every document unwritten."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, t: torch.Tensor, end: int) -> torch.Tensor:
        """``t`` unchanged (a view)."""
        ctx.end = end
        return t.view_as(t)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``grad`` with the rows from ``end`` on NaN."""
        return _nan_past(grad.shape[0], ctx.end, grad), None


def flash_like_varlen_attn(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    enable_gqa: bool = False,
) -> torch.Tensor:
    """CPU stand-in for ``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.12 keywords): each document through
    SDPA, the output rows and the query/key/value gradient rows outside every document NaN."""
    end_q, end_k = int(cu_seq_q[-1]), int(cu_seq_k[-1])
    query = _UnwrittenGradientRows.apply(query, end_q)
    key, value = (_UnwrittenGradientRows.apply(t, end_k) for t in (key, value))
    outputs = []
    for (q0, q1), (k0, k1) in zip(itertools.pairwise(cu_seq_q.tolist()), itertools.pairwise(cu_seq_k.tolist()),
                                  strict=True):
        q, k, v = (t.transpose(0, 1) for t in (query[q0:q1], key[k0:k1], value[k0:k1]))
        outputs.append(F.scaled_dot_product_attention(q, k, v, is_causal=tuple(window_size) == (-1, 0), scale=scale,
                                                      enable_gqa=enable_gqa).transpose(0, 1))
    outputs.append(query.new_full((query.shape[0] - end_q, *query.shape[1:]), float("nan")))
    return torch.cat(outputs)


@pytest.fixture
def flash_like_kernel(monkeypatch: pytest.MonkeyPatch):
    """The torch-native attention calls :func:`flash_like_varlen_attn` for bf16/fp16 packs while the test runs."""
    monkeypatch.setattr(attention_module, "varlen_attn", flash_like_varlen_attn)
    attention_module._varlen_parameters.cache_clear()
    yield
    attention_module._varlen_parameters.cache_clear()


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "unmasked"])
def test_packed_bf16_attention_zeroes_the_rows_the_varlen_kernel_leaves_unwritten(
    flash_like_kernel: None, generator: torch.Generator, causal: bool
) -> None:
    """Before the fix the padding rows after the last document came out as the kernel left them (NaN here), and so
    did their query/key/value gradients, which reach the QKV projection's weight gradient."""
    lengths, tail, params = _pack_with_tail(generator)
    real, total = sum(lengths), sum(lengths) + tail
    q, k, v = _qkv(total, torch.bfloat16, generator)
    out = _attention(causal, torch.bfloat16, bf16=True)(q, k, v, None, packed_seq_params=params)
    upstream = torch.randn(total, HQ * D, generator=generator).bfloat16()
    out.backward(upstream)
    assert out.dtype == torch.bfloat16 and torch.equal(out[real:], torch.zeros(tail, HQ * D, dtype=torch.bfloat16))
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = packed_attention_reference(*(t[:real] for t in exact), lengths, causal=causal)
    expected.backward(upstream[:real].double())
    assert relative_error(out[:real], expected) < BF16_BOUND
    for leaf, reference in zip((q, k, v), exact, strict=True):
        assert torch.equal(leaf.grad[real:], torch.zeros_like(leaf.grad[real:]))
        assert relative_error(leaf.grad, reference.grad) < BF16_BOUND
