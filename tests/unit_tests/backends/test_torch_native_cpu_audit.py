"""Torch-native backend paths the GPU tests alone covered, on the CPU against float64 loops: packed bf16 attention
through each ``varlen_attn`` signature torch releases have had (stand-ins of the same keywords), the experts'
clamped / offset / non-gated activations, the norms' epsilon, and a whole torch-native model's causality and the
hybrid stack's final norm, built by the spec builders."""

import itertools
import math
import random

import pytest
import torch
import torch.nn.functional as F
from backend_references import packed_attention_reference, relative_error
from backend_setup import build_experts, moe_config
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType

from megatron.oellm.backends.torch_native import attention as attention_module
from megatron.oellm.backends.torch_native.attention import SDPACoreAttention
from megatron.oellm.backends.torch_native.norm_linear import RMSNormColumnParallelLinear
from megatron.oellm.backends.torch_native.norms import RMSNorm
from megatron.oellm.layers.rms_norm import rms_norm_reference
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world

HQ, HKV, D = 4, 2, 8
BF16_BOUND = 2e-2
"""Max deviation relative to the reference's largest magnitude for bf16 (a masking, scaling or head-mapping bug: O(1))."""


def _documents(query, key, value, cu_q, cu_k, max_q, max_k, causal: bool, scale: float | None) -> torch.Tensor:
    """Each document through an fp32 SDPA, like a varlen kernel; refuses what the kernel cannot take: int64 offsets,
    maxima below the longest document (flash attention would read too few rows), or unequal head counts."""
    assert cu_q.dtype == cu_k.dtype == torch.int32, "varlen_attn takes int32 cu_seqlens"
    assert query.shape[1] == key.shape[1] == value.shape[1], "this signature shares no key/value heads"
    assert max_q >= int(cu_q.diff().max()) and max_k >= int(cu_k.diff().max()), "max_seqlen below a document"
    outputs = []
    for (q0, q1), (k0, k1) in zip(itertools.pairwise(cu_q.tolist()), itertools.pairwise(cu_k.tolist()), strict=True):
        q, k, v = (t.float().transpose(0, 1) for t in (query[q0:q1], key[k0:k1], value[k0:k1]))
        outputs.append(F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).transpose(0, 1))
    outputs.append(query.new_zeros(query.shape[0] - int(cu_q[-1]), *query.shape[1:]).float())
    return torch.cat(outputs).to(query.dtype)


def varlen_with_gqa(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
                    enable_gqa=False):
    """Stand-in of ``varlen_attn`` with torch 2.12's keywords: causal as ``window_size``, a scale, shared heads."""
    if enable_gqa:
        repeats = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeats, 1), value.repeat_interleave(repeats, 1)
    return _documents(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, tuple(window_size) == (-1, 0), scale)


def varlen_without_gqa(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
    """Stand-in with torch 2.11's keywords: ``window_size`` and ``scale`` but no ``enable_gqa`` (heads must match)."""
    return _documents(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, tuple(window_size) == (-1, 0), scale)


def varlen_causal_flag_only(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, is_causal=False):
    """Stand-in with torch 2.10's keywords: ``is_causal`` only; the kernel scales by 1/sqrt(head_dim) itself."""
    return _documents(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, None)


@pytest.fixture
def varlen_kernel(monkeypatch: pytest.MonkeyPatch):
    """Install a ``varlen_attn`` stand-in (the attention reads its keywords from its signature) for the test."""

    def install(kernel) -> None:
        monkeypatch.setattr(attention_module, "varlen_attn", kernel)
        attention_module._varlen_parameters.cache_clear()

    yield install
    attention_module._varlen_parameters.cache_clear()


@pytest.mark.parametrize("kernel", [varlen_with_gqa, varlen_without_gqa, varlen_causal_flag_only],
                         ids=["torch-2.12", "torch-2.11", "torch-2.10"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "unmasked"])
@pytest.mark.parametrize("custom_scale", [False, True], ids=["default-scale", "softmax-scale"])
@pytest.mark.parametrize("maxima_given", [True, False], ids=["maxima", "no-maxima"])
def test_packed_bf16_attention_matches_float64_through_every_varlen_signature(
    varlen_kernel, kernel, causal: bool, custom_scale: bool, maxima_given: bool
) -> None:
    """bf16 packs go to ``varlen_attn``, whose keywords changed between torch releases: without ``enable_gqa`` the
    key/value heads must be repeated to the query heads in GQA order (query head h reads group h // (HQ / HKV)),
    without ``scale`` the query is pre-scaled so that the kernel's own 1/sqrt(d) gives ``--softmax-scale``, and
    without maxima in ``packed_seq_params`` the longest document is measured. Checked per document against a
    float64 softmax, with a random ``softmax_scale`` (or none) and random document lengths."""
    varlen_kernel(kernel)
    scale = random.uniform(0.05, 1.0) if custom_scale else None
    config = moe_config(HQ * D, HQ, 4, 16, use_cpu_initialization=True, params_dtype=torch.bfloat16, bf16=True)
    mask = AttnMaskType.padding_causal if causal else AttnMaskType.padding
    attention = SDPACoreAttention(config, 1, mask, "self", softmax_scale=scale)
    lengths = [random.randint(1, 9) for _ in range(random.randint(2, 4))]
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64 if not maxima_given else torch.int32)
    longest = max(lengths) if maxima_given else None
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                             max_seqlen_kv=longest)
    total = sum(lengths)
    q = torch.randn(total, HQ, D).bfloat16()
    k, v = torch.randn(total, HKV, D).bfloat16(), torch.randn(total, HKV, D).bfloat16()
    out = attention(q, k, v, None, packed_seq_params=params)
    assert out.shape == (total, HQ * D) and out.dtype == torch.bfloat16
    expected = packed_attention_reference(q, k, v, lengths, causal=causal, scale=scale)
    assert relative_error(out, expected) < BF16_BOUND


def _activation_reference(x: torch.Tensor, gated: bool, act, clamp: float | None, offset: float) -> torch.Tensor:
    """megatron's expert activation in float64: gate clamped above, linear half clamped to +-clamp, plus offset."""
    if not gated:
        return act(x)
    gate, linear = x.chunk(2, dim=-1)
    if clamp is not None:
        gate, linear = gate.clamp(max=clamp), linear.clamp(min=-clamp, max=clamp)
    return act(gate) * (linear + offset)


@pytest.mark.parametrize("case", ["clamp", "glu_linear_offset", "gelu_not_gated", "gated_gelu_fused", "probs_on_input"])
def test_eager_expert_activations_match_a_per_expert_loop(case: str) -> None:
    """The eager activation honours the config as megatron's experts do: ``activation_func_clamp_value`` (gate
    clamped above only, linear half to +-value), ``glu_linear_offset`` added to the linear half, a non-gated
    activation other than SiLU, a gated GELU under ``bias_activation_fusion`` (megatron's fused kernel is SwiGLU only:
    a GeGLU run must not train SiLU), and routing probabilities applied once on the input (``moe_apply_probs_on_input``,
    top 1). Output and input gradient against a float64 loop over experts; fc1 weights are drawn large enough that
    the clamp bites."""
    hidden_size, ffn, experts_count = 16, 12, 4
    clamp = random.uniform(0.5, 1.5) if case == "clamp" else None
    offset = random.uniform(0.5, 2.0) if case == "glu_linear_offset" else 0.0
    gated = case != "gelu_not_gated"
    act = F.gelu if case in ("gelu_not_gated", "gated_gelu_fused") else F.silu
    probs_on_input = case == "probs_on_input"
    options = dict(activation_func_clamp_value=clamp, glu_linear_offset=offset, gated_linear_unit=gated,
                   activation_func=act, bias_activation_fusion=case == "gated_gelu_fused")
    if probs_on_input:
        options |= dict(moe_apply_probs_on_input=True, moe_router_topk=1, moe_router_pre_softmax=True)
    experts = build_experts(moe_config(hidden_size, 4, experts_count, ffn, use_cpu_initialization=True, **options))
    assert not experts.fused_swiglu
    with torch.no_grad():
        experts.linear_fc1.weight.normal_(std=1.0)
        experts.linear_fc2.weight.normal_(std=0.3)
    counts = [random.randint(0, 6) for _ in range(experts_count)]
    counts[random.randrange(experts_count)] += 3  # at least three tokens
    hidden = torch.randn(sum(counts), hidden_size, requires_grad=True)
    probs = torch.rand(sum(counts))
    grad_out = torch.randn(sum(counts), hidden_size)
    out, _ = experts(hidden, torch.tensor(counts), probs)
    out.backward(grad_out)

    exact = hidden.detach().double().requires_grad_()
    rows, start = [], 0
    for e, count in enumerate(counts):
        x, p = exact[start:start + count], probs[start:start + count].double()[:, None]
        h = (p * x if probs_on_input else x) @ experts.linear_fc1.weight[e].detach().double().T
        h = _activation_reference(h, gated, act, clamp, offset)
        rows.append((h if probs_on_input else h * p) @ experts.linear_fc2.weight[e].detach().double().T)
        start += count
    expected = torch.cat(rows)
    expected.backward(grad_out.double())
    assert relative_error(out, expected) < 1e-5
    assert relative_error(hidden.grad, exact.grad) < 1e-5


def test_rms_norm_uses_the_epsilon_it_is_built_with() -> None:
    """megatron builds every norm with ``eps=config.layernorm_epsilon`` (the card's ``norm_epsilon``); the module
    must use the ``eps`` it is given, not a default. Rows of mean square near eps make the epsilon matter."""
    eps = 10 ** random.uniform(-4, -3)
    zero_centered = random.choice([False, True])
    norm = RMSNorm(moe_config(32, 4, 4, 16, use_cpu_initialization=True, layernorm_epsilon=1e-6,
                              layernorm_zero_centered_gamma=zero_centered), 32, eps=eps)
    with torch.no_grad():
        norm.weight.normal_(mean=0.0 if zero_centered else 1.0, std=0.3)
    x = torch.randn(5, 32) * math.sqrt(eps) * random.uniform(0.5, 2.0)
    assert relative_error(norm(x), rms_norm_reference(x, norm.weight, eps, zero_centered)) < 1e-5



def test_rms_norm_refuses_a_fused_residual_it_would_not_add() -> None:
    """``fused_residual_rmsnorm`` asks the norm to add the residual itself; this norm never does, so building one
    for such a config is refused naming the option, rather than silently dropping the residual."""
    config = moe_config(32, 4, 4, 16, use_cpu_initialization=True, fused_residual_rmsnorm=True)
    with pytest.raises(ValueError, match="fused_residual_rmsnorm is not implemented by the torch-native backend"):
        RMSNorm(config, 32, eps=10 ** random.uniform(-6, -4))

def test_norm_and_linear_takes_the_configs_epsilon_and_refuses_layer_norm() -> None:
    """The fused norm + linear (the attention's QKV input, the GDN input projection) reads its epsilon from
    ``config.layernorm_epsilon``, as TELayerNormColumnParallelLinear does; a LayerNorm config is refused, naming it,
    rather than normalised as RMSNorm."""
    eps = 10 ** random.uniform(-4, -3)
    zero_centered = random.choice([False, True])
    with gloo_world():
        config = moe_config(32, 4, 4, 16, use_cpu_initialization=True, layernorm_epsilon=eps,
                            layernorm_zero_centered_gamma=zero_centered)
        common = dict(config=config, init_method=config.init_method, gather_output=False, bias=False,
                      skip_bias_add=False, is_expert=False)
        linear = RMSNormColumnParallelLinear(32, 48, **common)
        with torch.no_grad():
            linear.layer_norm_weight.normal_(mean=0.0 if zero_centered else 1.0, std=0.3)
        x = torch.randn(3, 2, 32) * math.sqrt(eps) * random.uniform(0.5, 2.0)
        out, bias = linear(x)
        assert bias is None
        expected = rms_norm_reference(x, linear.layer_norm_weight, eps, zero_centered) @ linear.weight.double().T
        assert relative_error(out, expected) < 1e-5
        common["config"] = moe_config(32, 4, 4, 16, use_cpu_initialization=True, normalization="LayerNorm")
        with pytest.raises(ValueError, match="RMSNorm only, got normalization='LayerNorm'"):
            RMSNormColumnParallelLinear(32, 48, **common)


def test_a_torch_native_qwen3_moe_model_is_causal() -> None:
    """The spec builders' attention is causal: the torch-native Qwen3-MoE model (CPU, fp32) gives the same logits at
    every position before a changed token, and other logits at the changed one. Bidirectional attention (a wrong
    mask type in the spec) would change the earlier positions too."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.models.qwen3_moe import spec

    card = get_card("qwen3-30b-a3b-tiny")
    seq = 12
    with gloo_world(), cpu_model_building():
        config = spec.transformer_config(card, params_dtype=torch.float32, use_cpu_initialization=True,
                                         moe_token_dispatcher_type="allgather")
        model = spec.build_model(card, backend="torch", config=config).eval()
        tokens = torch.randint(0, card.vocab_size, (2, seq))
        changed = tokens.clone()
        at = random.randint(1, seq - 1)
        changed[:, at] = (tokens[:, at] + random.randint(1, card.vocab_size - 1)) % card.vocab_size
        positions = torch.arange(seq).expand(2, seq)
        with torch.no_grad():
            before, after = (model(t, positions, None) for t in (tokens, changed))
    assert before.shape[:2] == (2, seq) and torch.isfinite(before).all()
    assert relative_error(after[:, :at], before[:, :at]) < 1e-6
    assert relative_error(after[:, at], before[:, at]) > 1e-3


@pytest.mark.parametrize("last_stage", [True, False])
def test_the_hybrid_stack_ends_in_the_cards_final_norm_on_the_last_stage_only(last_stage: bool) -> None:
    """The torch-native Qwen3.5 stack (CPU-built) carries its final norm on the stage that ends the model only, with
    the card's epsilon (1e-6, zero-centred gamma): its output equals the float64 RMSNorm of rows where the epsilon
    matters. A final norm on an earlier stage would add parameters no checkpoint has."""
    from megatron.oellm.cards import get_card

    card = get_card("qwen3.5-35b-a3b-tiny")
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(card, post_process=last_stage)
    final_norm = getattr(model.decoder, "final_norm", None)
    if not last_stage:
        assert final_norm is None
        assert not any("final_norm" in name for name in model.state_dict())
        return
    assert isinstance(final_norm, RMSNorm)
    with torch.no_grad():
        final_norm.weight.normal_(std=0.3)
    x = torch.randn(4, card.hidden_size) * math.sqrt(card.norm_epsilon) * random.uniform(0.5, 2.0)
    expected = rms_norm_reference(x, final_norm.weight, card.norm_epsilon, card.zero_centered_norm)
    assert relative_error(final_norm(x), expected) < 1e-5


def test_torch_native_specs_put_the_backends_modules_in_every_slot() -> None:
    """Both spec builders on the torch backend: the GDN output norm, the QK norms, pre-MLP and final norms are the
    backend's RMSNorm, the input norms fold into the norm + linear, core attention is SDPA, the routed experts are the
    grouped-GEMM experts and the router is the torch-gated one (a slot left as an identity would drop a norm)."""
    from megatron.core.transformer.identity_op import IdentityOp

    from megatron.oellm.backends.torch_native.attention import SDPACoreAttention as Attention
    from megatron.oellm.backends.torch_native.grouped_mlp import TorchGroupedMLP
    from megatron.oellm.backends.torch_native.router import TorchGatingTopKRouter
    from megatron.oellm.cards import get_card
    from megatron.oellm.models.qwen3_5 import spec as qwen3_5
    from megatron.oellm.models.qwen3_moe import spec as qwen3_moe

    hybrid = qwen3_5.hybrid_stack_spec(get_card("qwen3.5-35b-a3b-tiny"), "torch")
    gdn = hybrid.submodules.gdn_layer.submodules
    attention = hybrid.submodules.attention_layer.submodules
    moe = hybrid.submodules.moe_layer.submodules
    assert hybrid.params["final_norm"] is RMSNorm and gdn.self_attention.submodules.out_norm is RMSNorm
    assert gdn.input_layernorm is IdentityOp and attention.input_layernorm is IdentityOp
    assert gdn.self_attention.submodules.in_proj is RMSNormColumnParallelLinear
    assert moe.pre_mlp_layernorm is RMSNorm
    block = qwen3_moe.block_spec(get_card("qwen3-30b-a3b-tiny"), 2, "torch")
    assert block.layer_norm is RMSNorm
    gpt = block.layer_specs[0].submodules
    assert gpt.pre_mlp_layernorm is RMSNorm
    for layer, mlp in ((attention, moe.mlp), (gpt, gpt.mlp)):
        self_attention = layer.self_attention.submodules
        assert self_attention.q_layernorm is RMSNorm and self_attention.k_layernorm is RMSNorm
        assert self_attention.core_attention is Attention
        assert self_attention.linear_qkv is RMSNormColumnParallelLinear
        submodules = mlp.keywords["submodules"]
        assert submodules.experts.func is TorchGroupedMLP and submodules.router is TorchGatingTopKRouter


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_built_models_take_the_cards_rope_and_swiglu_experts(name: str) -> None:
    """A torch-native model built by its family's spec builder (CPU) rotates ``kv_channels * rotary_percent``
    channels with frequencies ``rotary_base ** (-2i / rotated)``, as the HF model does, and its experts compute
    SwiGLU, ``silu(gate) * linear``, on random fc1 outputs (float64 reference)."""
    from megatron.oellm.backends.torch_native.grouped_mlp import TorchGroupedMLP
    from megatron.oellm.cards import get_card

    card = get_card(name)
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(card)
    rotated = int(card.kv_channels * card.rotary_percent)
    expected = card.rotary_base ** (-torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
    assert relative_error(model.rotary_pos_emb.inv_freq, expected) < 1e-6
    experts = next(module for module in model.modules() if isinstance(module, TorchGroupedMLP))
    fc1_out = torch.randn(random.randint(2, 9), 2 * card.moe_ffn_hidden_size, dtype=torch.float64)
    gate, linear = fc1_out.chunk(2, dim=-1)
    assert relative_error(experts.activation(fc1_out), F.silu(gate) * linear) < 1e-12

