"""Torch-native packed bf16/fp16 attention on flash attention's varlen kernel (GPU): the rows past the last
document (padding at the end of a pack), which the kernel leaves unwritten in the output and in the query/key/value
gradients, come out zero, against per-document SDPA in float32. ``test_torch_native_packed_tail_rows.py`` checks the
same on CPU with a stand-in for the kernel."""

import itertools
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from backend_references import relative_error
from backend_setup import moe_config
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType

from megatron.oellm.backends.torch_native.attention import SDPACoreAttention
from tests.unit_tests.gpu_utils import no_tf32
from tests.unit_tests.models.hf_reference import fresh_seed

pytestmark = pytest.mark.gpu

HQ, HKV, D = 8, 2, 64
BOUND = 2e-2
"""Max deviation relative to the reference's largest magnitude for bf16/fp16 (a masking or scaling bug: O(1))."""


@pytest.fixture
def unwritten_memory_is_nan() -> Iterator[None]:
    """While the test runs, every ``torch.empty`` (flash attention's C++ allocations of the output and of dq/dk/dv
    too) is filled with NaN: torch's deterministic mode with ``fill_uninitialized_memory``, in its warn-only form
    so that the kernels stay the ones training runs. Rows a kernel leaves unwritten then read NaN, not whatever the
    caching allocator held (often zeros)."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def per_document_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: list[int], causal: bool
) -> torch.Tensor:
    """``[t, h, d]`` packed attention as one SDPA call per document (GQA); ``[t, HQ * D]`` with zero rows after the
    documents."""
    outputs, start = [], 0
    for n in lengths:
        doc = [t[start : start + n].transpose(0, 1) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*doc, is_causal=causal, enable_gqa=True)
        outputs.append(out.transpose(0, 1).reshape(n, -1))
        start += n
    outputs.append(q.new_zeros(q.shape[0] - start, q.shape[1] * q.shape[2]))
    return torch.cat(outputs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "unmasked"])
def test_varlen_rows_past_the_last_document_are_zero_with_zero_gradients(
    megatron_runtime: None, tf32_flags_restored: None, unwritten_memory_is_nan: None, dtype: torch.dtype, causal: bool
) -> None:
    """Random documents followed by 1-47 padding rows: output and gradients match float32 per-document SDPA, and
    the padding rows' output and query/key/value gradients are exactly zero (before the fix: the kernel's
    uninitialised memory, NaN here, which a sum over all rows or the QKV weight gradient takes in)."""
    no_tf32()
    generator = torch.Generator().manual_seed(fresh_seed())
    count = int(torch.randint(2, 6, (1,), generator=generator))
    lengths = torch.randint(1, 97, (count,), generator=generator).tolist()
    tail = int(torch.randint(1, 48, (1,), generator=generator))
    real, total = sum(lengths), sum(lengths) + tail
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths),
                             max_seqlen_kv=max(lengths))
    shapes = [(total, HQ, D), (total, HKV, D), (total, HKV, D)]
    q, k, v = (torch.randn(shape, generator=generator).to("cuda", dtype).requires_grad_() for shape in shapes)
    upstream = torch.randn(total, HQ * D, generator=generator).to("cuda", dtype)
    config = moe_config(HQ * D, HQ, 4, 64, params_dtype=dtype, bf16=dtype == torch.bfloat16,
                        fp16=dtype == torch.float16)
    attention = SDPACoreAttention(config, layer_number=1, attention_type="self",
                                  attn_mask_type=AttnMaskType.padding_causal if causal else AttnMaskType.padding)

    out = attention(q, k, v, None, packed_seq_params=params)
    out.backward(upstream)

    assert out.shape == (total, HQ * D) and out.dtype == dtype
    assert torch.equal(out[real:], torch.zeros_like(out[real:])), "padding rows of the output are not zero"
    for name, leaf in zip("qkv", (q, k, v), strict=True):
        assert torch.equal(leaf.grad[real:], torch.zeros_like(leaf.grad[real:])), f"padding rows of d{name} not zero"
    exact = [t.detach().float().requires_grad_() for t in (q, k, v)]
    expected = per_document_sdpa(*exact, lengths, causal)
    expected.backward(upstream.float())
    assert relative_error(out, expected) < BOUND
    for leaf, reference in zip((q, k, v), exact, strict=True):
        assert relative_error(leaf.grad, reference.grad) < BOUND
