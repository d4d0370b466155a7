"""Torch-native backend behaviour a mutation audit found untested, on the CPU against float64 loops: the core
attention's constructor dropout, mask-type refusals and packed-sequence corner cases (a mask tensor beside packed
params, one-sided maxima, fp16 on the varlen kernel), and the grouped experts' and router's argument handling."""

import itertools
import random

import pytest
import torch
import torch.nn.functional as F
from backend_references import attention_reference, packed_attention_reference, relative_error
from backend_setup import GroupStandIn, moe_config
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType

from megatron.oellm.backends.torch_native import attention as attention_module
from megatron.oellm.backends.torch_native.attention import SDPACoreAttention

HQ, HKV, D = 4, 2, 8
LOW_PRECISION_BOUND = 2e-2
"""Max deviation relative to the reference's largest magnitude for bf16/fp16 (a masking or scaling bug: O(1))."""


def _config(**overrides):
    """A CPU config with HQ query heads of D channels in HKV groups."""
    return moe_config(HQ * D, HQ, 4, 16, use_cpu_initialization=True, **overrides)


def _pack(dtype: torch.dtype = torch.float32) -> tuple[list[int], torch.Tensor, list[torch.Tensor]]:
    """Random document lengths, their int32 ``cu_seqlens`` and random ``[t, h, D]`` query/key/value in ``dtype``."""
    lengths = [random.randint(1, 9) for _ in range(random.randint(2, 4))]
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    total = sum(lengths)
    qkv = [torch.randn(total, heads, D).to(dtype) for heads in (HQ, HKV, HKV)]
    return lengths, cu, qkv


def _per_document_kernel(calls: list):
    """Stand-in of ``varlen_attn`` (torch 2.12 keywords) computing each document with an fp32 SDPA, recording the
    maxima and dtype it was called with, and refusing maxima below a document's length as flash attention would
    read too few rows."""

    def varlen_attn(query, key, value, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
                    enable_gqa=False):
        calls.append((query.dtype, max_q, max_k))
        assert isinstance(max_q, int) and isinstance(max_k, int)
        assert max_q >= int(cu_q.diff().max()) and max_k >= int(cu_k.diff().max()), "max_seqlen below a document"
        if enable_gqa:
            repeats = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(repeats, 1), value.repeat_interleave(repeats, 1)
        causal = tuple(window_size) == (-1, 0)
        out = query.new_zeros(query.shape, dtype=torch.float32)
        for (q0, q1), (k0, k1) in zip(itertools.pairwise(cu_q.tolist()), itertools.pairwise(cu_k.tolist()),
                                      strict=True):
            q, k, v = (t.float().transpose(0, 1) for t in (query[q0:q1], key[k0:k1], value[k0:k1]))
            out[q0:q1] = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).transpose(0, 1)
        return out.to(query.dtype)

    return varlen_attn


@pytest.fixture
def varlen_calls(monkeypatch: pytest.MonkeyPatch):
    """Install :func:`_per_document_kernel` as the attention's ``varlen_attn``; yields the list of its calls."""
    calls: list = []
    monkeypatch.setattr(attention_module, "varlen_attn", _per_document_kernel(calls))
    attention_module._varlen_parameters.cache_clear()
    yield calls
    attention_module._varlen_parameters.cache_clear()


def test_the_constructors_attention_dropout_overrides_the_configs() -> None:
    """Like megatron's DotProductAttention, an ``attention_dropout`` passed to the constructor wins over
    ``config.attention_dropout``: built with 0 on a config of 0.5 the module is deterministic in training and takes
    packed sequences; built with a dropout on a dropout-free config it refuses packs, naming the value it was given."""
    config_dropout = random.uniform(0.3, 0.6)
    attention = SDPACoreAttention(_config(attention_dropout=config_dropout), 1, AttnMaskType.causal, "self",
                                  attention_dropout=0.0).train()
    q, k, v = torch.randn(7, 2, HQ, D), torch.randn(7, 2, HKV, D), torch.randn(7, 2, HKV, D)
    out = attention(q, k, v, None)
    for i in range(2):
        assert relative_error(out[:, i], attention_reference(q[:, i], k[:, i], v[:, i], True)) < 1e-5
    lengths, cu, (pq, pk, pv) = _pack()
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths),
                             max_seqlen_kv=max(lengths))
    packed = attention(pq, pk, pv, None, packed_seq_params=params)
    assert relative_error(packed, packed_attention_reference(pq, pk, pv, lengths, causal=True)) < 1e-5

    given = round(random.uniform(0.05, 0.5), 3)
    refusing = SDPACoreAttention(_config(attention_dropout=0.0), 1, AttnMaskType.causal, "self",
                                 attention_dropout=given).eval()
    with pytest.raises(ValueError, match=rf"attention_dropout={given} "):
        refusing(pq, pk, pv, None, packed_seq_params=params)


def test_packed_attention_ignores_a_mask_tensor_given_beside_the_documents() -> None:
    """With packed sequences the documents come from ``cu_seqlens``; megatron may still hand over its (causal)
    ``attention_mask``, which must neither be refused (the refusal is for batched padding masks) nor applied: the
    output is each document's own causal attention."""
    attention = SDPACoreAttention(_config(), 1, AttnMaskType.padding_causal, "self")
    lengths, cu, (q, k, v) = _pack()
    total = sum(lengths)
    mask = torch.ones(1, 1, total, total, dtype=torch.bool).triu(1)  # megatron's convention: True = masked out
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths),
                             max_seqlen_kv=max(lengths))
    out = attention(q, k, v, mask, packed_seq_params=params)
    assert relative_error(out, packed_attention_reference(q, k, v, lengths, causal=True)) < 1e-5


@pytest.mark.parametrize("mask_type", [AttnMaskType.arbitrary])
def test_mask_types_other_than_causal_or_none_are_refused(mask_type: AttnMaskType) -> None:
    """An arbitrary mask would otherwise be run as unmasked attention without a word; the refusal names it."""
    attention = SDPACoreAttention(_config(), 1, mask_type, "self")
    q, kv = torch.randn(5, 1, HQ, D), torch.randn(5, 1, HKV, D)
    with pytest.raises(ValueError, match=rf"causal or unmasked attention, got {mask_type}"):
        attention(q, kv, kv, None)
    with pytest.raises(ValueError, match="causal or unmasked attention"):
        SDPACoreAttention(_config(), 1, AttnMaskType.causal, "self")(q, kv, kv, None, attn_mask_type=mask_type)


@pytest.mark.parametrize("given", ["q", "kv"])
def test_packed_bf16_attention_measures_the_maximum_it_was_not_given(varlen_calls: list, given: str) -> None:
    """``PackedSeqParams`` with only one of ``max_seqlen_q`` / ``max_seqlen_kv`` set: the missing one is measured
    from ``cu_seqlens`` (the kernel needs both as ints, and one below the longest document would read too few
    rows), and the output matches a float64 per-document softmax."""
    lengths, cu, (q, k, v) = _pack(torch.bfloat16)
    longest = max(lengths)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                             max_seqlen_q=longest if given == "q" else None,
                             max_seqlen_kv=longest if given == "kv" else None)
    out = SDPACoreAttention(_config(params_dtype=torch.bfloat16, bf16=True), 1, AttnMaskType.padding_causal,
                            "self")(q, k, v, None, packed_seq_params=params)
    assert [call[1:] for call in varlen_calls] == [(longest, longest)]
    expected = packed_attention_reference(q, k, v, lengths, causal=True)
    assert relative_error(out, expected) < LOW_PRECISION_BOUND


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_packed_fp16_and_bf16_attention_run_on_the_varlen_kernel(varlen_calls: list, dtype: torch.dtype) -> None:
    """Half-precision packs go to flash attention's varlen kernel, not to SDPA with a ``[t, t]`` document mask
    (quadratic memory in the pack length, meant for fp32 tests only); fp32 packs take the masked SDPA. Both match a
    float64 per-document softmax."""
    lengths, cu, (q, k, v) = _pack(dtype)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths),
                             max_seqlen_kv=max(lengths))
    config = _config(params_dtype=dtype, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16)
    out = SDPACoreAttention(config, 1, AttnMaskType.padding, "self")(q, k, v, None, packed_seq_params=params)
    assert [call[0] for call in varlen_calls] == [dtype]
    assert out.dtype == dtype
    assert relative_error(out, packed_attention_reference(q, k, v, lengths, causal=False)) < LOW_PRECISION_BOUND
    fp32 = [t.float() for t in (q, k, v)]
    out32 = SDPACoreAttention(_config(), 1, AttnMaskType.padding, "self")(*fp32, None, packed_seq_params=params)
    assert len(varlen_calls) == 1, "fp32 packs have no varlen kernel"
    assert relative_error(out32, packed_attention_reference(*fp32, lengths, causal=False)) < 1e-5


def _stacked_linear(mode: str, **config_overrides):
    """A StackedGroupedLinear of a few experts of random sizes in ``mode`` ('column' or 'row'), world of one."""
    from megatron.oellm.backends.torch_native.grouped_mlp import StackedGroupedLinear

    experts, inputs, outputs = random.randint(2, 4), random.randint(3, 9), 2 * random.randint(2, 5)  # gated fc1: even
    linear = StackedGroupedLinear(experts, inputs, outputs, parallel_mode=mode,
                                  config=_config(**config_overrides), init_method=torch.nn.init.normal_, bias=False,
                                  skip_bias_add=False, is_expert=True, tp_comm_buffer_name=None, pg_collection=None)
    return linear, (experts, outputs, inputs)


@pytest.mark.parametrize(("mode", "split_axis"), [("column", 1), ("row", 2)])
def test_stacked_expert_weights_mark_the_feature_axis_expert_tp_splits(mode: str, split_axis: int) -> None:
    """The stacked weight ``[experts, out, in]`` carries megatron's tensor-parallel attributes with the axis the
    expert-TP split runs along (output features for fc1, input features for fc2; what TE's per-expert weights mark
    as 0 / 1, shifted by the expert axis), which megatron-core's resharding reads; never the expert axis."""
    linear, shape = _stacked_linear(mode)
    assert linear.weight.shape == shape
    assert linear.weight.tensor_model_parallel is True
    assert linear.weight.partition_dim == split_axis
    assert linear.weight.partition_stride == 1


def test_grouped_experts_refuse_probabilities_on_the_input_of_several_experts() -> None:
    """``moe_apply_probs_on_input`` scales a token's input once, which is right for one expert per token only; with
    top-k > 1 the torch-native experts refuse it when built (a hand-made config never reaches the spec builders'
    check), naming the setting."""
    from backend_setup import build_experts

    topk = random.randint(2, 4)
    config = moe_config(16, 4, 4, 12, use_cpu_initialization=True, moe_apply_probs_on_input=True,
                        moe_router_topk=topk)
    with pytest.raises(ValueError, match="moe_apply_probs_on_input only works with moe_router_topk=1"):
        build_experts(config)
    build_experts(moe_config(16, 4, 4, 12, use_cpu_initialization=True, moe_apply_probs_on_input=True,
                             moe_router_topk=1, moe_router_pre_softmax=True))



def test_expert_extra_states_sit_on_the_global_expert_axis_once_per_checkpoint(monkeypatch) -> None:
    """TE's per-expert ``_extra_state{i}`` objects of every (EP rank, expert-TP rank) of a layout: expert i of EP rank
    r is global expert ``r * E + i`` of ``ep * E``, all global experts appear, and each object has exactly one main
    replica (the expert-TP ranks hold copies, and a checkpoint with two main replicas of one object is invalid).
    Every rank is simulated in this process with stand-in groups."""
    from megatron.core.process_groups_config import ProcessGroupCollection

    from megatron.oellm.backends.torch_native.grouped_mlp import StackedGroupedLinear

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    local, ep, etp = random.randint(2, 3), random.randint(2, 3), 2  # local >= 2: r * E + i differs from r + i
    config = _config(expert_model_parallel_size=ep, expert_tensor_parallel_size=etp, perform_initialization=False)
    owners: dict[tuple, list] = {}
    for ep_rank, tp_rank in itertools.product(range(ep), range(etp)):
        groups = ProcessGroupCollection()
        groups.ep, groups.expt_tp, groups.expt_dp = GroupStandIn(ep_rank, ep), GroupStandIn(tp_rank, etp), GroupStandIn(0, 1)
        linear = StackedGroupedLinear(local, 8, 4 * etp, parallel_mode="column", config=config, init_method=None,
                                      bias=False, skip_bias_add=False, is_expert=True, tp_comm_buffer_name=None,
                                      pg_collection=groups)
        sharded = linear.sharded_state_dict("experts.fc1.")
        objects = {name: value for name, value in sharded.items() if "_extra_state" in name}
        assert sorted(objects) == sorted(f"experts.fc1._extra_state{i or ''}" for i in range(local))
        for i in range(local):
            shard = objects[f"experts.fc1._extra_state{i or ''}"]
            assert shard.key == "experts.fc1._extra_state"
            assert tuple(shard.global_shape) == (ep * local,)
            assert tuple(shard.global_offset) == (ep_rank * local + i,)
            owners.setdefault(tuple(shard.global_offset), []).append(all(r == 0 for r in shard.replica_id))
    assert sorted(owners) == [(g,) for g in range(ep * local)]
    assert all(len(mains) == etp and sum(mains) == 1 for mains in owners.values()), owners


def test_a_partial_te_named_state_dict_is_reported_not_half_stacked() -> None:
    """Loading TE's per-expert names with one expert's matrix missing: the stacked weight is left as it was and the
    load reports the stacked key missing and the per-expert ones unexpected (strict loading raises that, naming
    them), instead of failing inside the stacking hook."""
    from backend_setup import build_experts

    experts_count = random.randint(2, 4)
    experts = build_experts(moe_config(16, 4, experts_count, 12, use_cpu_initialization=True))
    before = experts.linear_fc1.weight.detach().clone()
    state = experts.state_dict()
    dropped = random.randrange(experts_count)
    partial = {name: torch.randn_like(value) if torch.is_tensor(value) else value for name, value in state.items()
               if name != f"linear_fc1.weight{dropped}"}
    result = experts.load_state_dict(partial, strict=False)
    assert result.missing_keys == ["linear_fc1.weight"]
    assert sorted(result.unexpected_keys) == sorted(f"linear_fc1.weight{i}" for i in range(experts_count)
                                                    if i != dropped)
    assert torch.equal(experts.linear_fc1.weight, before)
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: \"linear_fc1.weight\""):
        experts.load_state_dict(partial, strict=True)


def test_stacked_expert_linears_refuse_what_they_cannot_hold() -> None:
    """A StackedGroupedLinear holds MoE expert matrices only: built as a dense linear (``is_expert=False``, which would
    put it under the dense gradient reduction) or with a ``parallel_mode`` other than column/row it refuses, naming
    the argument."""
    from megatron.oellm.backends.torch_native.grouped_mlp import StackedGroupedLinear

    common = dict(config=_config(), init_method=torch.nn.init.normal_, bias=False, skip_bias_add=False,
                  tp_comm_buffer_name=None, pg_collection=None)
    with pytest.raises(ValueError, match="is_expert=True"):
        StackedGroupedLinear(2, 8, 8, parallel_mode="column", is_expert=False, **common)
    mode = random.choice(["duplicated", "Column", "", "rows"])
    with pytest.raises(ValueError, match=rf"parallel_mode must be 'column' or 'row', got {mode!r}"):
        StackedGroupedLinear(2, 8, 8, parallel_mode=mode, is_expert=True, **common)


@pytest.mark.parametrize(("overrides", "named"), [
    (dict(moe_mlp_glu_interleave_size=2), "moe_mlp_glu_interleave_size"),
    (dict(moe_latent_size=8), "moe_latent_size"),
], ids=["glu-interleave", "latent"])
def test_grouped_experts_refuse_layouts_they_do_not_implement(overrides: dict, named: str) -> None:
    """An interleaved GLU layout would be read as two contiguous halves and latent projections would be skipped, both
    silently; the torch-native experts refuse such a config when built, naming the field."""
    from backend_setup import build_experts

    with pytest.raises(ValueError, match=rf"do not support {named}; unset it"):
        build_experts(moe_config(16, 4, 4, 12, use_cpu_initialization=True, **overrides))


def test_bf16_experts_take_fp32_probabilities_on_their_input() -> None:
    """megatron's router hands over fp32 routing probabilities; with ``moe_apply_probs_on_input`` (top 1) a bf16
    model's experts scale their bf16 input by them and keep computing in bf16: output in bf16, matching a float64
    loop over experts."""
    from backend_references import grouped_mlp_reference
    from backend_setup import build_experts

    hidden_size, ffn, count = 32, 16, 4  # bf16 grouped GEMMs want rows of a multiple of 16 bytes
    config = moe_config(hidden_size, 4, count, ffn, use_cpu_initialization=True, params_dtype=torch.bfloat16,
                        bf16=True, moe_apply_probs_on_input=True, moe_router_topk=1, moe_router_pre_softmax=True)
    experts = build_experts(config)
    with torch.no_grad():
        for parameter in experts.parameters():
            parameter.normal_(std=0.5)
    tokens = [random.randint(1, 6) for _ in range(count)]
    hidden = torch.randn(sum(tokens), hidden_size).bfloat16()
    probs = torch.rand(sum(tokens))  # fp32, as megatron's router gives them
    out, _ = experts(hidden, torch.tensor(tokens), probs)
    assert out.dtype == torch.bfloat16
    expected = grouped_mlp_reference(hidden, tokens, probs, list(experts.linear_fc1.weight),
                                     list(experts.linear_fc2.weight), gated=True, probs_on_input=True)
    assert relative_error(out, expected) < LOW_PRECISION_BOUND


@pytest.mark.parametrize("params_dtype", [torch.float16, torch.bfloat16])
def test_a_config_of_half_precision_parameters_is_judged_by_its_parameters(monkeypatch, params_dtype) -> None:
    """A TransformerConfig built by hand with fp16 (or bf16) ``params_dtype`` and its switch left off feeds
    half-precision attention inputs to Transformer Engine, so ``attention_backend=flash`` with a flash-attn 2 taken
    up is a run the te backend can do; judged by the switch alone it was refused as fp32 training. fp32 parameters
    are refused, naming the dtype rule."""
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron.oellm.backends import selection
    from megatron.oellm.backends import te_flash_attention as te_flash

    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    monkeypatch.setattr(te_flash, "te_flash_attention_found", lambda: te_flash.FlashAttentionFound({2: "2.7.4"}))
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: None)
    for generation in te_flash.FLASH_ATTN_PACKAGES:
        monkeypatch.delenv(f"NVTE_FLASH_ATTN_V{generation}", raising=False)
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                attention_backend=AttnBackend.flash)
    config = TransformerConfig(**base, params_dtype=params_dtype)
    assert not (config.fp16 or config.bf16)
    selection.check_config_support("te", config)
    with pytest.raises(ValueError, match=r"fp32 training \(TE's flash attention takes bf16 or fp16 only\)"):
        selection.check_config_support("te", TransformerConfig(**base, params_dtype=torch.float32))


@pytest.mark.parametrize(("flags", "fields", "message"), [
    (["--fp4-format", "e2m1"], dict(fp4="e2m1", bf16=True, params_dtype=torch.bfloat16),
     r"fp4 training \(needs Transformer Engine\): drop --fp4-format"),
    (["--fp8-format", "hybrid"], dict(fp8="hybrid", bf16=True, params_dtype=torch.bfloat16),
     r"fp8 training \(needs Transformer Engine\): drop --fp8-format"),
], ids=["fp4", "fp8"])
def test_low_precision_formats_are_read_from_arguments_and_config(flags: list[str], fields: dict,
                                                                  message: str) -> None:
    """fp4 / fp8 training needs Transformer Engine's linears: the torch backend's check refuses it whether it comes
    from Megatron's arguments (the training entry, before Megatron initialises) or from a TransformerConfig, naming
    the flag to drop; the same run without the format passes."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron.oellm.backends import selection
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    with pytest.raises(ValueError, match=message):
        selection.check_args_support("torch", megatron_parser().parse_args([*card_argv, *flags]))
    selection.check_args_support("torch", megatron_parser().parse_args(card_argv))
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm")
    with pytest.raises(ValueError, match=message):
        selection.check_config_support("torch", TransformerConfig(**base, **fields))


def test_a_cuda_error_while_reading_the_gpu_leaves_the_gpu_rule_out(monkeypatch) -> None:
    """``cuda_capability`` answers None (the flash-attention GPU rule left out) when CUDA is missing or reading the
    device's properties raises a CUDA error, rather than stopping the backend check; a readable GPU gives its
    ``(major, minor)`` tuple."""
    from megatron.oellm.backends import te_flash_attention as te_flash

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: unspecified launch failure")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", broken)
    assert te_flash.cuda_capability() is None
    capability = (random.randint(7, 12), random.randint(0, 9))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args, **kwargs: capability)
    assert te_flash.cuda_capability() == capability
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert te_flash.cuda_capability() is None


def test_a_flash_attention_pin_turns_off_at_zero_only() -> None:
    """Transformer Engine reads ``NVTE_FLASH_ATTN_V*`` as an integer and keeps a generation on for any non-zero
    value: only a value equal to 0 ("0", "00") drops it from what ``oellm doctor`` reports runnable, and a value
    that is not a number is left for TE to judge."""
    from megatron.oellm.backends import te_flash_attention as te_flash
    from megatron.oellm.training.attention_env import version_pin

    found = te_flash.FlashAttentionFound({2: "2.7.4"})
    variable = version_pin(2)
    for value in (str(random.randint(1, 9)), str(-random.randint(1, 9)), "1", "on"):
        assert te_flash.runnable_flash_attention(found, environ={variable: value}, capability=None) == {2: "2.7.4"}
    for value in ("0", "00"):
        assert te_flash.runnable_flash_attention(found, environ={variable: value}, capability=None) == {}
