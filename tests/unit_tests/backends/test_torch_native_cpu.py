"""Torch-native modules on CPU (fp32): checkpoint names, load round trips and math against float64 loops."""

import contextlib
import dataclasses
import random
from collections.abc import Iterator

import pytest
import torch
from backend_references import (
    attention_reference,
    experts_errors_from_float64,
    grouped_mlp_reference,
    packed_attention_reference,
    relative_error,
)
from backend_setup import build_experts, moe_config
from megatron.core import tensor_parallel
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends.torch_native.attention import SDPACoreAttention
from megatron.oellm.backends.torch_native.norms import RMSNorm
from megatron.oellm.layers.rms_norm import rms_norm_reference

NUM_EXPERTS = 4
HIDDEN = 32
FFN = 48


def make_config(**overrides) -> TransformerConfig:
    """A small CPU-initialised config with a SwiGLU MoE."""
    return moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, use_cpu_initialization=True, **overrides)


def test_grouped_mlp_state_dict_uses_te_names() -> None:
    experts = build_experts(make_config())
    state = experts.state_dict()
    expected = {f"linear_fc{n}.weight{i}" for n in (1, 2) for i in range(NUM_EXPERTS)}
    expected |= {"linear_fc1._extra_state", "linear_fc2._extra_state"}
    assert set(state) == expected
    assert state["linear_fc1.weight0"].shape == (2 * FFN, HIDDEN)
    assert state["linear_fc2.weight3"].shape == (HIDDEN, FFN)
    torch.testing.assert_close(state["linear_fc1.weight2"], experts.linear_fc1.weight[2], rtol=0, atol=0)


def test_grouped_mlp_loads_te_named_state_dict() -> None:
    experts = build_experts(make_config())
    te_state = {f"linear_fc1.weight{i}": torch.randn(2 * FFN, HIDDEN) for i in range(NUM_EXPERTS)}
    te_state |= {f"linear_fc2.weight{i}": torch.randn(HIDDEN, FFN) for i in range(NUM_EXPERTS)}
    te_state |= {"linear_fc1._extra_state": None, "linear_fc2._extra_state": None}
    experts.load_state_dict(te_state, strict=True)
    for i in range(NUM_EXPERTS):
        torch.testing.assert_close(experts.linear_fc1.weight[i], te_state[f"linear_fc1.weight{i}"], rtol=0, atol=0)
        torch.testing.assert_close(experts.linear_fc2.weight[i], te_state[f"linear_fc2.weight{i}"], rtol=0, atol=0)
    reloaded = build_experts(make_config())
    reloaded.load_state_dict(experts.state_dict(), strict=True)
    torch.testing.assert_close(reloaded.linear_fc2.weight, experts.linear_fc2.weight, rtol=0, atol=0)


@pytest.mark.parametrize("gated", [True, False])
def test_grouped_mlp_matches_per_expert_loop(gated: bool) -> None:
    experts = build_experts(make_config(gated_linear_unit=gated))
    counts = [5, 0, 9, 3]  # expert 1 receives no tokens
    hidden = torch.randn(sum(counts), HIDDEN)
    probs = torch.rand(sum(counts))
    out, bias = experts(hidden, torch.tensor(counts), probs)
    assert bias is None
    expected = grouped_mlp_reference(
        hidden, counts, probs, list(experts.linear_fc1.weight), list(experts.linear_fc2.weight), gated
    )
    assert relative_error(out, expected) < 1e-5


@pytest.mark.parametrize("probs_on_input", [False, True], ids=["weighted", "probs_on_input"])
def test_fused_swiglu_experts_match_per_expert_loop_with_gradients(monkeypatch, probs_on_input: bool) -> None:
    """``bias_activation_fusion`` runs megatron-core's compiled SwiGLU, weighted by the probabilities or (top 1
    with ``moe_apply_probs_on_input``) unweighted (each about 17 s to compile on 2 cores): output and the gradients
    of input, probabilities and both weights against the float64 loop."""
    from megatron.oellm.backends.torch_native import grouped_mlp

    called = []
    for name in ("weighted_bias_swiglu_impl", "bias_swiglu_impl"):
        fused = getattr(grouped_mlp, name)
        monkeypatch.setattr(grouped_mlp, name, lambda *args, _fn=fused, _name=name: called.append(_name) or _fn(*args))
    options = (
        dict(moe_apply_probs_on_input=True, moe_router_topk=1, moe_router_pre_softmax=True) if probs_on_input else {}
    )
    experts = build_experts(make_config(bias_activation_fusion=True, **options))
    assert experts.fused_swiglu
    counts = [6, 0, 11, 4]
    hidden = torch.randn(sum(counts), HIDDEN, requires_grad=True)
    probs = torch.rand(sum(counts), requires_grad=True)
    grad_out = torch.randn(sum(counts), HIDDEN)
    out, _ = experts(hidden, torch.tensor(counts), probs)
    out.backward(grad_out)
    errors = experts_errors_from_float64(experts, hidden, probs, grad_out, out, counts, gated=True,
                                         probs_on_input=probs_on_input)
    assert all(error < 1e-5 for error in errors.values()), errors
    assert called == ["bias_swiglu_impl" if probs_on_input else "weighted_bias_swiglu_impl"]


@pytest.mark.parametrize(
    "overrides",
    [
        dict(bias_activation_fusion=False),
        dict(bias_activation_fusion=True, activation_func_clamp_value=7.0),
        dict(bias_activation_fusion=True, gated_linear_unit=False),
    ],
)
def test_experts_keep_the_eager_activation_where_the_fused_swiglu_does_not_apply(overrides: dict) -> None:
    assert not build_experts(make_config(**overrides)).fused_swiglu


@pytest.mark.parametrize("zero_centered", [False, True])
def test_rms_norm_matches_reference(zero_centered: bool) -> None:
    norm = RMSNorm(make_config(layernorm_zero_centered_gamma=zero_centered), HIDDEN, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(mean=0.0 if zero_centered else 1.0, std=0.3)
    x = torch.randn(3, 2, HIDDEN) * 4
    assert set(norm.state_dict()) == {"weight", "_extra_state"}  # TE's RMSNorm's keys
    assert relative_error(norm(x), rms_norm_reference(x, norm.weight, 1e-6, zero_centered)) < 1e-6


@pytest.mark.parametrize("zero_centered", [False, True])
def test_a_new_rms_norm_scales_by_one_and_is_marked_for_sequence_parallel_reduction(zero_centered: bool) -> None:
    """A freshly built norm is the identity scale (gamma 1, or 0 when zero-centred: the kernel adds 1), so its output
    is ``x / rms(x)``, computed here in float64; its gamma carries ``sequence_parallel`` as the config says, which is
    what makes megatron all-reduce the gamma gradient over the tensor-parallel ranks when each holds a token shard."""
    for sequence_parallel in (False, True):
        config = make_config(layernorm_zero_centered_gamma=zero_centered, sequence_parallel=sequence_parallel,
                             tensor_model_parallel_size=2 if sequence_parallel else 1)
        norm = RMSNorm(config, HIDDEN, eps=1e-6)
        assert norm.weight.sequence_parallel is sequence_parallel
    x = torch.randn(3, 2, HIDDEN, dtype=torch.float64) * random.uniform(0.5, 4.0)
    expected = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    assert relative_error(norm(x.float()), expected) < 1e-6


def test_attention_refuses_a_sliding_window_when_built() -> None:
    """The torch-native attention has no sliding window: built with one it would attend to the whole causal past."""
    window = (random.randint(1, 64), 0)
    with pytest.raises(ValueError, match="sliding-window attention"):
        SDPACoreAttention(make_config(window_size=window), 1, AttnMaskType.causal, "self")


@pytest.mark.parametrize(("parallel", "reduced_over_all_data_parallel_ranks"), [
    ({}, True), ({"expert_model_parallel_size": 2}, False), ({"expert_tensor_parallel_size": 2}, False)])
def test_expert_weights_take_the_expert_gradient_reduction_as_te_grouped_linears_do(
        parallel: dict, reduced_over_all_data_parallel_ranks: bool) -> None:
    """``allreduce`` tells megatron's DDP which group reduces a parameter's gradient: experts split by expert
    parallelism, or by an expert tensor-parallel size other than the tensor-parallel one, reduce over the expert
    data-parallel group only (TEGroupedLinear: ``allreduce = not (EP > 1 or ETP != TP)``); all-reducing them over the
    whole data-parallel group would sum the gradients of different experts."""
    from megatron.oellm.backends.torch_native.grouped_mlp import StackedGroupedLinear

    config = make_config(**parallel)  # CPU-initialised
    common = dict(parallel_mode="column", config=config, init_method=torch.nn.init.zeros_, skip_bias_add=False,
                  is_expert=True, tp_comm_buffer_name=None, pg_collection=None)
    linear = StackedGroupedLinear(2, HIDDEN, 2 * FFN, bias=False, **common)
    assert linear.weight.allreduce is reduced_over_all_data_parallel_ranks
    with pytest.raises(ValueError, match="grouped experts have no bias"):  # never silently dropped
        StackedGroupedLinear(2, HIDDEN, 2 * FFN, bias=True, **common)


def test_rms_norm_rejects_layer_norm_config() -> None:
    with pytest.raises(ValueError, match="RMSNorm only"):
        RMSNorm(make_config(normalization="LayerNorm"), HIDDEN)


def make_attention(mask_type: AttnMaskType) -> SDPACoreAttention:
    return SDPACoreAttention(make_config(), layer_number=1, attn_mask_type=mask_type, attention_type="self")


class SeededForkTracker:
    """CPU stand-in for megatron's CUDA RNG tracker: ``fork()`` swaps torch's CPU generator onto its own stream,
    as the real tracker swaps the CUDA one, and counts the forks."""

    def __init__(self, seed: int):
        self.state = torch.Generator().manual_seed(seed).get_state()
        self.forks = 0

    @contextlib.contextmanager
    def fork(self) -> Iterator[None]:
        self.forks += 1
        outside = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            yield
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(outside)


@pytest.mark.parametrize(
    ("training", "sequence_parallel", "forks"), [(True, False, 1), (False, False, 0), (True, True, 0)]
)
def test_attention_dropout_draws_from_the_model_parallel_rng_tracker(
    monkeypatch: pytest.MonkeyPatch, training: bool, sequence_parallel: bool, forks: int
) -> None:
    tracker = SeededForkTracker(seed=2718)
    monkeypatch.setattr(tensor_parallel, "get_cuda_rng_tracker", lambda: tracker)
    attention = SDPACoreAttention(
        make_config(attention_dropout=0.5), layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self"
    )
    attention.config.sequence_parallel = sequence_parallel
    attention.train(training)
    q, k, v = torch.randn(9, 2, 4, 8), torch.randn(9, 2, 2, 8), torch.randn(9, 2, 2, 8)
    default_before = torch.get_rng_state()
    tracker_before = tracker.state.clone()
    out = attention(q, k, v, None)
    assert tracker.forks == forks
    assert torch.equal(tracker.state, tracker_before) == (forks == 0)
    assert torch.equal(torch.get_rng_state(), default_before) == (forks == 1 or not training)
    if training:  # the mask was applied: dropout changes the output
        without = torch.stack([attention_reference(q[:, i], k[:, i], v[:, i], True) for i in range(2)], dim=1)
        assert relative_error(out, without.to(out.dtype)) > 0.1


@pytest.mark.parametrize("causal", [True, False])
def test_batched_gqa_attention_matches_reference(causal: bool) -> None:
    attention = make_attention(AttnMaskType.causal if causal else AttnMaskType.no_mask)
    s, b, hq, hkv, d = 7, 2, 4, 2, 8
    q, k, v = torch.randn(s, b, hq, d), torch.randn(s, b, hkv, d), torch.randn(s, b, hkv, d)
    out = attention(q, k, v, None)
    assert out.shape == (s, b, hq * d)
    for i in range(b):
        assert relative_error(out[:, i], attention_reference(q[:, i], k[:, i], v[:, i], causal)) < 1e-5


def test_attention_applies_the_softmax_scale_it_is_given() -> None:
    """megatron-core builds core attention with ``softmax_scale=config.softmax_scale`` (``--softmax-scale``); the
    batched and the packed paths must use it, not ``1/sqrt(head_dim)`` (0.354 here), against a float64 softmax."""
    scale = random.choice([random.uniform(0.05, 0.2), random.uniform(0.6, 1.0)])
    attention = SDPACoreAttention(make_config(), 1, AttnMaskType.causal, "self", softmax_scale=scale)
    s, b, d = 7, 2, 8
    q, k, v = torch.randn(s, b, 4, d), torch.randn(s, b, 2, d), torch.randn(s, b, 2, d)
    out = attention(q, k, v, None)
    for i in range(b):
        assert relative_error(out[:, i], attention_reference(q[:, i], k[:, i], v[:, i], True, scale)) < 1e-5
    lengths = [3, 4]
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=4, max_seqlen_kv=4)
    packed = attention(q[:, 0], k[:, 0], v[:, 0], None, packed_seq_params=params)
    expected = packed_attention_reference(q[:, 0], k[:, 0], v[:, 0], lengths, causal=True, scale=scale)
    assert relative_error(packed, expected) < 1e-5


def test_an_explicit_mask_is_refused_unless_the_mask_type_is_causal() -> None:
    """With ``padding_causal`` an ``attention_mask`` tensor carries padding the causal mask does not imply: applied as
    plain causal attention, padded positions would be attended to without a word. Only ``causal`` may pass (and
    ignore) one."""
    q, kv = torch.randn(5, 2, 4, 8), torch.randn(5, 2, 2, 8)
    mask = torch.zeros(2, 1, 5, 5, dtype=torch.bool)
    mask[..., -random.randint(1, 2):] = True  # megatron's convention: True = masked out
    for mask_type in (AttnMaskType.padding_causal, AttnMaskType.padding):
        with pytest.raises(ValueError, match="explicit attention_mask"):
            make_attention(mask_type)(q, kv, kv, mask)
    causal = make_attention(AttnMaskType.causal)(q, kv, kv, mask)
    assert relative_error(causal[:, 0], attention_reference(q[:, 0], kv[:, 0], kv[:, 0], True)) < 1e-5


def test_packed_fp32_attention_keeps_documents_apart() -> None:
    attention = make_attention(AttnMaskType.padding_causal)
    lengths = [3, 6, 1, 5]
    total = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=6, max_seqlen_kv=6)
    q, k, v = torch.randn(total, 4, 8), torch.randn(total, 2, 8), torch.randn(total, 2, 8)
    out = attention(q, k, v, None, packed_seq_params=params)
    assert relative_error(out, packed_attention_reference(q, k, v, lengths, causal=True)) < 1e-5


def test_attention_rejects_bias_and_context_parallelism() -> None:
    attention = make_attention(AttnMaskType.causal)
    q = torch.randn(2, 1, 4, 8)
    with pytest.raises(ValueError, match="attention_bias"):
        attention(q, q, q, None, attention_bias=torch.zeros(1))
    with pytest.raises(ValueError, match="context parallelism"):
        SDPACoreAttention(make_config(context_parallel_size=2), 1, AttnMaskType.causal, "self")


@pytest.mark.parametrize(
    "overrides",
    [
        dict(softmax_type="off-by-one"),
        dict(softmax_type="learnable"),
        dict(qk_clip=True),
        dict(log_max_attention_logit=True),
    ],
    ids=["off-by-one", "learnable", "qk_clip", "log_max_attention_logit"],
)
def test_attention_refuses_softmax_offsets_and_max_logit_records(overrides: dict) -> None:
    """An off-by-one or learnable softmax would be computed as the vanilla one, and qk_clip reads max logits the
    module does not record: refused when the module is built."""
    with pytest.raises(ValueError, match="softmax_type|max attention logits"):
        SDPACoreAttention(make_config(**overrides), 1, AttnMaskType.causal, "self")


def _padded_pack() -> tuple[PackedSeqParams, list[int], torch.Tensor]:
    """Three documents of 3, 5 and 2 tokens padded to 4, 8 and 2: params, real lengths, indices of real tokens."""
    real, padded = [3, 5, 2], [4, 8, 2]
    cu = torch.tensor([0, 3, 8, 10], dtype=torch.int32)
    cu_padded = torch.tensor([0, 4, 12, 14], dtype=torch.int32)
    params = PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        cu_seqlens_q_padded=cu_padded,
        cu_seqlens_kv_padded=cu_padded,
        max_seqlen_q=max(padded),
        max_seqlen_kv=max(padded),
    )
    starts = cu_padded[:-1].tolist()
    index = torch.cat([torch.arange(start, start + n) for start, n in zip(starts, real, strict=True)])
    return params, real, index


def test_packed_causal_attention_over_padded_documents_is_exact_for_real_tokens() -> None:
    params, real, index = _padded_pack()
    q, k, v = torch.randn(14, 4, 8), torch.randn(14, 2, 8), torch.randn(14, 2, 8)
    out = make_attention(AttnMaskType.padding_causal)(q, k, v, None, packed_seq_params=params)
    expected = packed_attention_reference(q[index], k[index], v[index], real, causal=True)
    assert relative_error(out[index], expected) < 1e-5


def test_packed_unmasked_attention_over_padded_documents_is_refused() -> None:
    """Without a causal mask the real tokens would attend to their document's padding (an O(1) error)."""
    params, _, _ = _padded_pack()
    q, kv = torch.randn(14, 4, 8), torch.randn(14, 2, 8)
    with pytest.raises(ValueError, match="padding of padded documents"):
        make_attention(AttnMaskType.padding)(q, kv, kv, None, packed_seq_params=params)
    unpadded = PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=params.cu_seqlens_q,
        cu_seqlens_kv=params.cu_seqlens_kv,
        cu_seqlens_q_padded=params.cu_seqlens_q.clone(),
        cu_seqlens_kv_padded=params.cu_seqlens_kv.clone(),
        max_seqlen_q=5,
        max_seqlen_kv=5,
    )
    q, kv = q[:10], kv[:10]
    out = make_attention(AttnMaskType.padding)(q, kv, kv, None, packed_seq_params=unpadded)
    assert relative_error(out, packed_attention_reference(q, kv, kv, [3, 5, 2], causal=False)) < 1e-5


@pytest.mark.parametrize("padded", ["query", "key/value"])
def test_packed_unmasked_attention_refuses_padding_on_either_side(padded: str) -> None:
    """The refusal reads the query's and the key/value's document boundaries alike: padding on one side alone
    would also have real tokens attend to padding, or padding rows attend as queries."""
    params, _, _ = _padded_pack()
    unpadded = params.cu_seqlens_q.clone()
    side = {"cu_seqlens_kv_padded": unpadded} if padded == "query" else {"cu_seqlens_q_padded": unpadded}
    one_side = dataclasses.replace(params, **side)
    q, kv = torch.randn(14, 4, 8), torch.randn(14, 2, 8)
    with pytest.raises(ValueError, match="padding of padded documents"):
        make_attention(AttnMaskType.padding)(q, kv, kv, None, packed_seq_params=one_side)
