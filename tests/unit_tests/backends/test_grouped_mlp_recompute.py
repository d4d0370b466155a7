"""Selective recompute of the torch-native experts' activation (``moe_act``) on the CPU.

megatron-core's output-discarding checkpoint needs CUDA for its RNG states and compiles a C++ extension to hand the
recomputed storage back; both are replaced here by CPU stand-ins with the same effect (the GPU test of
``test_grouped_mlp_recompute_gpu.py`` runs the real ones)."""

import pytest
import torch
from backend_references import experts_errors_from_float64
from backend_setup import build_experts, moe_config
from megatron.core.tensor_parallel import random as megatron_random

HIDDEN, FFN, NUM_EXPERTS = 32, 48, 4
COUNTS = [7, 0, 12, 5]  # expert 1 receives no tokens


def _copy_storage(destination: torch.Tensor, source: torch.Tensor) -> None:
    """CPU stand-in for megatron-core's compiled ``share_storage``: give the freed ``destination`` storage the
    recomputed bytes of ``source`` (a copy instead of a shared pointer; no autograd version bump either way)."""
    storage = destination.untyped_storage()
    storage.resize_(source.untyped_storage().nbytes())
    storage.copy_(source.untyped_storage())


@pytest.fixture
def cpu_checkpointing(monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron-core's CheckpointWithoutOutput runnable on the CPU: RNG states of the CPU generator only, storage
    hand-back by copy."""
    monkeypatch.setattr(megatron_random, "_get_all_rng_states", lambda: (torch.get_rng_state(), None, None))
    monkeypatch.setattr(megatron_random, "_set_all_rng_states", lambda cpu, cuda, tracker: torch.set_rng_state(cpu))
    monkeypatch.setattr(megatron_random, "_get_share_storage", lambda: _copy_storage)


def _count_activations(experts: torch.nn.Module) -> list[torch.Tensor]:
    """Record every output of ``experts.weighted_activation`` (forward and recompute) in the returned list."""
    outputs: list[torch.Tensor] = []
    activation = experts.weighted_activation

    def recorded(*args: torch.Tensor | None) -> torch.Tensor:
        outputs.append(activation(*args))
        return outputs[-1]

    experts.weighted_activation = recorded
    return outputs


def _check_activation_stored(config) -> None:
    """Experts built from ``config`` recompute no activation: one forward calls the activation once and its output's
    storage stays allocated."""
    experts = build_experts(config)
    assert not experts.activation_recompute
    outputs = _count_activations(experts)
    experts(torch.randn(sum(COUNTS), HIDDEN), torch.tensor(COUNTS), torch.rand(sum(COUNTS)))
    assert len(outputs) == 1 and outputs[0].untyped_storage().nbytes() > 0


@pytest.mark.parametrize("gated", [True, False])
def test_moe_act_recompute_frees_the_activation_and_keeps_the_gradients(cpu_checkpointing: None, gated: bool) -> None:
    """With ``moe_act`` in ``recompute_modules`` the activation output's storage is freed once fc2 used it and
    recomputed in the backward pass (two activation calls, TEGroupedMLP's behaviour); output and the gradients of
    input, probabilities and both weights equal the float64 per-expert loop."""
    config = moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, use_cpu_initialization=True, gated_linear_unit=gated,
                        recompute_granularity="selective", recompute_modules=["moe_act"])
    experts = build_experts(config)
    assert experts.activation_recompute
    outputs = _count_activations(experts)
    hidden = torch.randn(sum(COUNTS), HIDDEN, requires_grad=True)
    probs = torch.rand(sum(COUNTS), requires_grad=True)
    grad_out = torch.randn(sum(COUNTS), HIDDEN)
    out, _ = experts(hidden, torch.tensor(COUNTS), probs)
    assert len(outputs) == 1 and outputs[0].untyped_storage().nbytes() == 0  # freed after fc2
    out.backward(grad_out)
    assert len(outputs) == 2  # recomputed for the backward pass
    errors = experts_errors_from_float64(experts, hidden, probs, grad_out, out, COUNTS, gated=gated)
    assert all(error < 1e-5 for error in errors.values()), errors


def test_experts_keep_the_activation_without_moe_act_recompute() -> None:
    """Selective recompute of other modules (megatron's default ``core_attn``) leaves the activation stored."""
    _check_activation_stored(moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, use_cpu_initialization=True,
                                        recompute_granularity="selective"))


@pytest.mark.parametrize("granularity", ["full", None])
def test_moe_act_in_recompute_modules_is_ignored_without_selective_recompute(granularity: str | None) -> None:
    """As megatron-core's grouped experts, ``moe_act`` counts only under selective recompute: full recompute (which
    recomputes the whole layer already) or no recompute with ``moe_act`` still listed keeps the activation stored."""
    full = dict(recompute_method="uniform", recompute_num_layers=1) if granularity == "full" else {}
    _check_activation_stored(moe_config(HIDDEN, 4, NUM_EXPERTS, FFN, use_cpu_initialization=True,
                                        recompute_granularity=granularity, recompute_modules=["moe_act"], **full))
