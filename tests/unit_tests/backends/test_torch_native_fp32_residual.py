"""Torch-native norms and norm + linear under ``fp32_residual_connection`` with bf16 weights: they take the fp32
residual stream, compute in bf16 and return bf16, and a whole torch-native MoE model trains with it (CPU, float64
references). Each test fails if a module stops with a dtype mismatch, returns fp32 to the next bf16 module, or
drops the option."""

import pytest
import torch
from backend_references import relative_error
from backend_setup import moe_config

from megatron.oellm.backends.torch_native.norm_linear import RMSNormColumnParallelLinear
from megatron.oellm.backends.torch_native.norms import RMSNorm
from megatron.oellm.layers.rms_norm import rms_norm_reference
from tests.unit_tests.cpu_megatron import gloo_world

HIDDEN, EPS = 32, 1e-6
BF16_BOUND = 2e-2
"""Max deviation relative to the reference's largest magnitude for bf16 outputs (a wrong input or scale: O(1))."""



@pytest.mark.parametrize("zero_centered", [False, True])
def test_norms_take_the_fp32_residual_stream_of_a_bf16_model(world_of_one, zero_centered: bool) -> None:
    """With ``fp32_residual_connection`` (``--fp32-residual-connection``) megatron-core feeds every pre-norm the fp32
    residual stream while the weights are bf16; Transformer Engine's norms cast their input to the weights' dtype
    first. The fused norm + linear stopped at the first step with a dtype mismatch, and the plain norm returned fp32,
    which the next bf16 module (output layer, grouped experts) refuses the same way."""
    config = moe_config(HIDDEN, 4, 4, 48, use_cpu_initialization=True, params_dtype=torch.bfloat16, bf16=True,
                        fp32_residual_connection=True, layernorm_zero_centered_gamma=zero_centered)
    linear = RMSNormColumnParallelLinear(HIDDEN, 3 * HIDDEN, config=config, init_method=config.init_method,
                                         gather_output=False, bias=False, skip_bias_add=False, is_expert=False)
    norm = RMSNorm(config, HIDDEN, eps=EPS)
    linear.layer_norm_eps = EPS
    with torch.no_grad():
        for gamma in (linear.layer_norm_weight, norm.weight):
            gamma.normal_(mean=0.0 if zero_centered else 1.0, std=0.3)
    residual = (torch.randn(5, 2, HIDDEN) * 3).requires_grad_()  # fp32, as the residual stream is

    out, bias = linear(residual)
    normed = norm(residual)
    assert bias is None and out.dtype == normed.dtype == torch.bfloat16
    rounded = residual.detach().bfloat16()  # what the bf16 modules compute with, as in Transformer Engine
    expected_linear = rms_norm_reference(rounded, linear.layer_norm_weight, EPS, zero_centered).bfloat16().double()
    assert relative_error(out, expected_linear @ linear.weight.double().T) < BF16_BOUND
    assert relative_error(normed, rms_norm_reference(rounded, norm.weight, EPS, zero_centered)) < BF16_BOUND

    (out.float() * torch.randn(out.shape)).sum().backward()
    assert residual.grad.dtype == torch.float32 and residual.grad.abs().sum() > 0


def test_a_torch_native_moe_model_trains_with_an_fp32_residual_stream() -> None:
    """The whole torch-native Qwen3-MoE model (CPU, all-gather dispatcher) with ``fp32_residual_connection``: forward
    and backward run, the residual stream reaching the final norm is fp32 (the option is honoured, not dropped),
    and the logits are finite bf16. Before the fix the first norm + linear stopped with a dtype mismatch."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.models.qwen3_moe import spec
    from tests.unit_tests.cpu_megatron import cpu_model_building

    card = get_card("qwen3-30b-a3b-tiny")
    with gloo_world(), cpu_model_building():
        config = spec.transformer_config(card, params_dtype=torch.bfloat16, use_cpu_initialization=True,
                                         moe_token_dispatcher_type="allgather", fp32_residual_connection=True)
        model = spec.build_model(card, backend="torch", config=config)
        residual_dtypes = []
        model.decoder.final_layernorm.register_forward_pre_hook(lambda _, args: residual_dtypes.append(args[0].dtype))
        tokens = torch.randint(0, card.vocab_size, (2, 16))
        logits = model(tokens, torch.arange(16).expand(2, 16), None)
        (logits.float() * torch.randn(logits.shape)).sum().backward()
    assert residual_dtypes == [torch.float32]
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()
    assert model.embedding.word_embeddings.weight.grad is not None
