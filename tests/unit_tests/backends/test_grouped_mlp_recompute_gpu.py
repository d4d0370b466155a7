"""Selective recompute of the torch-native experts' activation (``moe_act``) on the GPU, with megatron-core's own
output-discarding checkpoint (its first use compiles a small C++ extension, about two minutes)."""

import pytest
import torch
from backend_references import relative_error
from backend_setup import build_experts, moe_config
from megatron.core.process_groups_config import ProcessGroupCollection

from tests.unit_tests.gpu_utils import no_tf32

pytestmark = pytest.mark.gpu

HIDDEN, FFN, NUM_EXPERTS = 128, 96, 8
COUNTS = [0, 37, 0, 91, 5, 0, 60, 2]  # three experts without tokens, ragged others


def _experts(dtype: torch.dtype, fused: bool, recompute: bool) -> torch.nn.Module:
    """Provider-built experts in ``dtype``; ``recompute`` puts ``moe_act`` in the selective recompute modules."""
    options = dict(recompute_granularity="selective", recompute_modules=["moe_act"]) if recompute else {}
    config = moe_config(HIDDEN, 8, NUM_EXPERTS, FFN, params_dtype=dtype, bf16=dtype == torch.bfloat16,
                        bias_activation_fusion=fused, **options)
    return build_experts(config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused_swiglu"])
def test_moe_act_recompute_frees_the_activation_and_keeps_the_gradients(
    megatron_runtime: None, tf32_flags_restored: None, dtype: torch.dtype, fused: bool
) -> None:
    """The activation output is freed after fc2 and recomputed in the backward pass; output and every gradient
    equal those of the same experts without recompute (same kernels, so within one rounding)."""
    no_tf32()
    stored, recomputed = _experts(dtype, fused, recompute=False), _experts(dtype, fused, recompute=True)
    recomputed.load_state_dict(stored.state_dict())
    assert recomputed.activation_recompute and not stored.activation_recompute
    activations: list[torch.Tensor] = []
    activation = recomputed.weighted_activation
    recomputed.weighted_activation = lambda *args: activations.append(activation(*args)) or activations[-1]
    hidden = torch.randn(sum(COUNTS), HIDDEN, device="cuda", dtype=dtype)
    probs = torch.rand(sum(COUNTS), device="cuda")
    grad_out = torch.randn(sum(COUNTS), HIDDEN, device="cuda", dtype=dtype)
    tokens_per_expert = torch.tensor(COUNTS, device="cuda")
    results = []
    for experts in (stored, recomputed):
        inputs = [hidden.clone().requires_grad_(), probs.clone().requires_grad_()]
        out, _ = experts(inputs[0], tokens_per_expert, inputs[1])
        if experts is recomputed:
            assert len(activations) == 1 and activations[0].untyped_storage().nbytes() == 0
        out.backward(grad_out)
        results.append([out, *(t.grad for t in inputs), experts.linear_fc1.weight.grad, experts.linear_fc2.weight.grad])
    assert len(activations) == 2
    bound = 1e-6 if dtype == torch.float32 else 1e-2
    for want, got in zip(*results, strict=True):
        assert relative_error(got, want) < bound
