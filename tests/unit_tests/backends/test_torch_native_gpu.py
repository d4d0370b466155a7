"""Torch-native modules on the GPU against float64 references (fp32 and bf16), plus checkpoint-layout parity."""

import pytest
import torch
from backend_references import (
    attention_reference,
    grouped_mlp_reference,
    packed_attention_reference,
    relative_error,
)
from backend_setup import build_experts as build_provider_experts
from backend_setup import moe_config
from megatron.core import tensor_parallel
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.utils import ensure_metadata_has_dp_cp_group
from router_checks import (
    TENSOR_CORE_BOUND,
    TENSOR_CORE_SHARE,
    assert_same_as_fp32_copies,
    bf16_router_gradients,
)

from megatron.oellm.backends.torch_native.attention import SDPACoreAttention
from megatron.oellm.backends.torch_native.norm_linear import RMSNormColumnParallelLinear
from megatron.oellm.backends.torch_native.router import TorchGatingTopKRouter, uses_bf16_tensor_cores
from megatron.oellm.layers.rms_norm import rms_norm_reference
from tests.unit_tests.gpu_utils import no_tf32
from tests.unit_tests.models.hf_reference import errors, fresh_seed

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-2}
"""Max deviation relative to the reference's largest magnitude; a routing, masking or scaling bug gives O(1)."""
DTYPES = [torch.float32, torch.bfloat16]
NUM_EXPERTS = 8
HIDDEN = 128
FFN = 96


def make_config(dtype: torch.dtype, **overrides) -> TransformerConfig:
    """Small GPU config: SwiGLU MoE, GQA attention, RMSNorm, no dropout, parameters in ``dtype``."""
    return moe_config(HIDDEN, 8, NUM_EXPERTS, FFN, params_dtype=dtype, bf16=dtype == torch.bfloat16, **overrides)


def build_experts(config: TransformerConfig, grouped: bool = True):
    """Experts as the provider builds them for an MoE layer, with megatron's process groups."""
    return build_provider_experts(config, grouped, ProcessGroupCollection.use_mpu_process_groups())


COUNTS = [0, 37, 0, 91, 5, 0, 60, 2]  # three experts without tokens, ragged others


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused_swiglu"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_mlp_matches_per_expert_loop(megatron_runtime: None, dtype: torch.dtype, fused: bool) -> None:
    experts = build_experts(make_config(dtype, bias_activation_fusion=fused))
    assert experts.fused_swiglu == fused
    hidden = torch.randn(sum(COUNTS), HIDDEN, device="cuda", dtype=dtype)
    probs = torch.rand(sum(COUNTS), device="cuda", dtype=torch.float32)
    out, _ = experts(hidden, torch.tensor(COUNTS, device="cuda"), probs)
    fc1, fc2 = list(experts.linear_fc1.weight), list(experts.linear_fc2.weight)
    expected = grouped_mlp_reference(hidden, COUNTS, probs, fc1, fc2, gated=True)
    assert out.dtype == dtype
    assert relative_error(out, expected) < TOLERANCE[dtype]


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused_swiglu"])
def test_grouped_mlp_gradients_match_reference(megatron_runtime: None, fused: bool) -> None:
    experts = build_experts(make_config(torch.float32, bias_activation_fusion=fused))
    hidden = torch.randn(sum(COUNTS), HIDDEN, device="cuda", requires_grad=True)
    probs = torch.rand(sum(COUNTS), device="cuda", requires_grad=True)
    grad_out = torch.randn(sum(COUNTS), HIDDEN, device="cuda")
    out, _ = experts(hidden, torch.tensor(COUNTS, device="cuda"), probs)
    out.backward(grad_out)
    leaves = [t.detach().double().requires_grad_() for t in (hidden, probs)]
    w1 = experts.linear_fc1.weight.detach().double().requires_grad_()
    w2 = experts.linear_fc2.weight.detach().double().requires_grad_()
    expected = grouped_mlp_reference(leaves[0], COUNTS, leaves[1], list(w1), list(w2), gated=True)
    expected.backward(grad_out.double())
    assert relative_error(hidden.grad, leaves[0].grad) < TOLERANCE[torch.float32]
    assert relative_error(probs.grad, leaves[1].grad) < TOLERANCE[torch.float32]
    assert relative_error(experts.linear_fc1.weight.grad, w1.grad) < TOLERANCE[torch.float32]
    assert relative_error(experts.linear_fc2.weight.grad, w2.grad) < TOLERANCE[torch.float32]
    assert experts.linear_fc1.weight.grad[0].abs().max() == 0  # expert 0 saw no tokens


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused_swiglu"])
def test_grouped_mlp_forward_never_waits_on_the_host(megatron_runtime: None, fused: bool) -> None:
    experts = build_experts(make_config(torch.bfloat16, bias_activation_fusion=fused))
    hidden = torch.randn(sum(COUNTS), HIDDEN, device="cuda", dtype=torch.bfloat16)
    probs = torch.rand(sum(COUNTS), device="cuda")
    tokens_per_expert = torch.tensor(COUNTS, device="cuda")
    experts(hidden, tokens_per_expert, probs)  # the fused SwiGLU compiles on its first call
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        experts(hidden, tokens_per_expert, probs)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zero_centered", [False, True])
def test_norm_linear_matches_reference(megatron_runtime: None, dtype: torch.dtype, zero_centered: bool) -> None:
    config = make_config(dtype, layernorm_zero_centered_gamma=zero_centered, layernorm_epsilon=1e-6)
    module = RMSNormColumnParallelLinear(
        HIDDEN,
        3 * FFN,
        config=config,
        init_method=config.init_method,
        gather_output=False,
        bias=False,
        skip_bias_add=False,
        is_expert=False,
    )
    with torch.no_grad():
        module.layer_norm_weight.normal_(mean=0.0 if zero_centered else 1.0, std=0.3)
    x = torch.randn(16, 3, HIDDEN, device="cuda", dtype=dtype) * 3
    out, bias = module(x)
    assert bias is None and out.dtype == dtype
    normed = rms_norm_reference(x, module.layer_norm_weight, 1e-6, zero_centered)
    if dtype == torch.bfloat16:
        normed = normed.to(dtype).double()  # the module rounds the norm output before the GEMM, like TE
    assert relative_error(out, normed @ module.weight.double().T) < TOLERANCE[dtype]
    assert set(module.state_dict()) == {"weight", "layer_norm_weight", "_extra_state"}
    prefix = "decoder.layers.0.self_attention.linear_qkv."
    sharded = module.sharded_state_dict(prefix=prefix, metadata=ensure_metadata_has_dp_cp_group(None))
    assert set(sharded) == {f"{prefix}{k}" for k in module.state_dict()}


def make_attention(dtype: torch.dtype, mask: AttnMaskType, softmax_scale: float | None = None) -> SDPACoreAttention:
    return SDPACoreAttention(
        make_config(dtype), layer_number=1, attn_mask_type=mask, attention_type="self", softmax_scale=softmax_scale
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("causal", "scale"), [(True, None), (False, None), (True, 0.05)])
def test_batched_gqa_attention_matches_reference(
    megatron_runtime: None, dtype: torch.dtype, causal: bool, scale: float | None
) -> None:
    attention = make_attention(dtype, AttnMaskType.causal if causal else AttnMaskType.no_mask, scale)
    s, b, hq, hkv, d = 96, 2, 8, 2, 64
    q = torch.randn(s, b, hq, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(s, b, hkv, d, device="cuda", dtype=dtype) for _ in range(2))
    out = attention(q, k, v, None)
    assert out.shape == (s, b, hq * d) and out.dtype == dtype
    for i in range(b):
        expected = attention_reference(q[:, i], k[:, i], v[:, i], causal, scale)
        assert relative_error(out[:, i], expected) < TOLERANCE[dtype]


def test_attention_dropout_draws_from_the_model_parallel_rng_tracker(megatron_runtime: None) -> None:
    attention = SDPACoreAttention(
        make_config(torch.bfloat16, attention_dropout=0.5), layer_number=1, attn_mask_type=AttnMaskType.causal,
        attention_type="self",
    )
    q = torch.randn(64, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(64, 2, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker_before, default_before = tracker.get_states(), torch.cuda.get_rng_state()
    dropped = attention.train()(q, k, v, None)
    assert torch.equal(torch.cuda.get_rng_state(), default_before), "dropout drew from torch's default generator"
    assert any(not torch.equal(tracker_before[n], state) for n, state in tracker.get_states().items())
    tracker.set_states(tracker_before)
    assert torch.equal(attention(q, k, v, None), dropped), "the tracker's state does not replay the same masks"
    assert relative_error(dropped, attention.eval()(q, k, v, None)) > 0.1, "no dropout was applied"


@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_gqa_attention_matches_per_document_reference(megatron_runtime: None, dtype: torch.dtype) -> None:
    attention = make_attention(dtype, AttnMaskType.padding_causal)
    lengths = [17, 64, 1, 46]
    total, hq, hkv, d = sum(lengths), 8, 2, 64
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    params = PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths)
    )
    q = torch.randn(total, hq, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(total, hkv, d, device="cuda", dtype=dtype) for _ in range(2))
    out = attention(q, k, v, None, packed_seq_params=params)
    assert out.shape == (total, hq * d)
    expected = packed_attention_reference(q, k, v, lengths, causal=True)
    assert relative_error(out, expected) < TOLERANCE[dtype]


@pytest.mark.usefixtures("tf32_flags_restored")
def test_fp32_router_logits_and_gradients_are_fp32_with_or_without_transformer_engine(megatron_runtime: None) -> None:
    """The torch-native router's fp32 gating product (logits and both gradients) against float64, TF32 off.

    megatron-core's own ``TopKRouter`` computes it with Transformer Engine's GEMM whenever TE imports, which is TF32
    for fp32 operands (relative error ~1e-4, above this bound); the torch-native router must not, wherever it runs.
    """
    no_tf32()
    router = TorchGatingTopKRouter(config=make_config(torch.float32, moe_router_dtype="fp32"),
                                   pg_collection=ProcessGroupCollection.use_mpu_process_groups()).cuda()
    with torch.no_grad():
        router.weight.copy_(torch.randn_like(router.weight))
    hidden = torch.randn(256, HIDDEN, device="cuda", requires_grad=True)
    upstream = torch.randn(256, NUM_EXPERTS, device="cuda")
    router.gating(hidden).backward(upstream)
    exact_hidden = hidden.detach().double().requires_grad_()
    exact_weight = router.weight.detach().double().requires_grad_()
    logits = exact_hidden @ exact_weight.t()
    logits.backward(upstream.double())
    with torch.no_grad():
        ours = router.gating(hidden)
    assert relative_error(ours, logits) <= 1e-6
    assert relative_error(hidden.grad, exact_hidden.grad) <= 1e-6
    assert relative_error(router.weight.grad, exact_weight.grad) <= 1e-6


@pytest.mark.usefixtures("tf32_flags_restored")
def test_fp32_router_of_bf16_operands_on_tensor_cores_at_qwen35_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3.5's router at 8 x 4096 tokens (32,768 x 2048 bf16 activations, 256 experts, fp32 router): the tensor-core
    products give fp32 logits within the tensor cores' fp32 accumulation error of float64 and of the fp32-copies path
    (``OELLM_FP32_OPERAND_ROUTER=1``), and the same bf16 gradients but for rounding-boundary elements."""
    generator = torch.Generator(device="cuda").manual_seed(fresh_seed())
    hidden = torch.randn(32768, 2048, device="cuda", generator=generator).bfloat16()
    weight = (0.02 * torch.randn(256, 2048, device="cuda", generator=generator)).bfloat16()
    upstream = 1e-4 * torch.randn(32768, 256, device="cuda", generator=generator)
    assert uses_bf16_tensor_cores(hidden, weight, torch.float32)
    tensor_cores = bf16_router_gradients(hidden, weight, upstream)
    monkeypatch.setenv("OELLM_FP32_OPERAND_ROUTER", "1")
    assert not uses_bf16_tensor_cores(hidden, weight, torch.float32)
    no_tf32()
    upcast = bf16_router_gradients(hidden, weight, upstream)
    exact = hidden.double() @ weight.double().t()
    print(f"\nrouter logits vs float64: tensor cores {errors(tensor_cores[0], exact)[0]:.3e}, "
          f"fp32 copies {errors(upcast[0], exact)[0]:.3e}")
    assert errors(tensor_cores[0], exact)[0] <= TENSOR_CORE_BOUND
    shares = assert_same_as_fp32_copies(tensor_cores, upcast, TENSOR_CORE_BOUND, TENSOR_CORE_SHARE)
    print(f"bf16 gradient elements differing from the fp32-copies path: input {shares[0]:.2e}, weight {shares[1]:.2e}")

def test_router_left_on_the_cpu_moves_its_parameters_to_the_input_gpu(megatron_runtime: None) -> None:
    """megatron-core lets a router's parameters stay on the CPU until the first forward; the torch-native router then
    moves them to the input's GPU (as megatron-core's does) and computes the same logits as a router built there."""
    config = make_config(torch.float32, moe_router_dtype="fp32", add_bias_linear=True)
    router = TorchGatingTopKRouter(config=config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    with torch.no_grad():
        router.weight.copy_(torch.randn_like(router.weight))
        router.bias.copy_(torch.randn_like(router.bias))
    weight, bias = router.weight.detach().clone(), router.bias.detach().clone()
    assert not router.weight.is_cuda
    hidden = torch.randn(64, HIDDEN, device="cuda")
    logits = router.gating(hidden)
    assert router.weight.device == hidden.device and router.bias.device == hidden.device
    expected = hidden.double() @ weight.double().cuda().t() + bias.double().cuda()
    assert relative_error(logits, expected) <= 1e-6
