"""Activation recompute, set as the recipes set it, keeps the gradients of the same model without recompute (GPU).

The MN5 recipes run full uniform recompute of one layer together with ``--moe-router-force-load-balancing`` (random
router logits, drawn again when a layer is recomputed); the Jupiter recipe recomputes ``moe_act`` and ``layernorm``;
megatron's ``--moe-layer-recompute`` recomputes the whole MoE block (``moe``); ``core_attn`` is megatron's default
selective module, ``shared_experts`` the other MoE choice. Each case builds the tiny
card twice with the same weights, once with the case's recompute settings, runs one forward and backward from the
same RNG state, and checks that the recomputed module really ran twice, the loss is the same and every parameter's
gradient matches (fp32, TF32 off, the same kernels on both sides; fla's GDN kernels use TF32 inside). Fresh seed
each run. Without Transformer Engine the
``layernorm`` case needs ``patches/recompute-without-transformer-engine.md`` (megatron's checkpoint fails with a
``NameError`` otherwise).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

from megatron.oellm.cards import get_card
from tests.unit_tests.gpu_utils import BACKENDS, no_tf32, reseed

pytestmark = pytest.mark.gpu

BATCH, SEQ = 2, 64
GRADIENT_BOUND = 1e-5
"""Relative L2 bound on each parameter's gradient: fp32 with TF32 off and the same kernels on both sides, so any
difference is summation order; a recompute that routes differently or drops a branch is off by O(1)."""
GDN_GRADIENT_BOUND = 1e-3
"""The same bound for a model with Gated DeltaNet layers: fla's kernels take TF32 dot products even for fp32 inputs, so
one rounding of difference in front of them (``shared_experts`` recompute adds the shared and routed paths' input
gradients in another order) can move their results by a TF32 step (about 1e-3 relative). Measured on the H200: up to
7.7e-05 for ``shared_experts`` on the tiny Qwen3.5 card (above 1e-5 in 4 of 6 runs), largest in the first GDN layer's
parameters; every other case gave bit-identical gradients (docs/benchmarks.md, session 38)."""


def _first(model: torch.nn.Module, kind: Callable[[str, torch.nn.Module], bool]) -> torch.nn.Module:
    """The first sub-module of ``model`` (in registration order) that ``kind(name, module)`` accepts."""
    return next(module for name, module in model.named_modules() if kind(name, module))


def _first_layer(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder's first layer (what full recompute checkpoints first)."""
    return model.decoder.layers[0]


def _first_router(model: torch.nn.Module) -> torch.nn.Module:
    """The first MoE block's router (``moe`` recompute checkpoints the block's inside, router included)."""
    return _first(model, lambda _name, module: type(module).__name__ == "MoELayer").router


def _first_pre_mlp_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The first real norm in front of an MLP or MoE block (``layernorm`` recompute checkpoints it; a layer
    without one holds an ``IdentityOp`` there)."""
    return _first(model, lambda name, module: name.endswith("pre_mlp_layernorm")
                  and type(module).__name__ != "IdentityOp")


def _first_core_attention(model: torch.nn.Module) -> torch.nn.Module:
    """The first softmax attention's core (``core_attn`` recompute checkpoints it)."""
    return _first(model, lambda name, _module: name.endswith("self_attention.core_attention"))


def _first_shared_expert(model: torch.nn.Module) -> torch.nn.Module:
    """The first MoE block's shared expert (``shared_experts`` recompute checkpoints it)."""
    return _first(model, lambda _name, module: type(module).__name__ == "MoELayer").shared_experts


CASES = {
    "full-uniform-1": (dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
                       _first_layer),
    "full-block-2": (dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2),
                     _first_layer),
    "selective-moe_act-layernorm": (dict(recompute_granularity="selective", recompute_modules=["moe_act", "layernorm"]),
                                    _first_pre_mlp_norm),
    "selective-moe": (dict(recompute_granularity="selective", recompute_modules=["moe"]), _first_router),
    "selective-core_attn": (dict(recompute_granularity="selective", recompute_modules=["core_attn"]),
                            _first_core_attention),
    "selective-shared_experts": (dict(recompute_granularity="selective", recompute_modules=["shared_experts"]),
                                 _first_shared_expert),
}
"""Recompute settings by name, with the module each one must run twice per step."""


def _step(model: torch.nn.Module, tokens: torch.Tensor, seed: int,
          counted: torch.nn.Module) -> tuple[float, dict[str, torch.Tensor], int]:
    """Loss, gradients by parameter name and how often ``counted`` ran, for one forward and backward from ``seed``."""
    calls = []
    handle = counted.register_forward_hook(lambda *_: calls.append(1))
    try:
        reseed(seed)
        positions = torch.arange(SEQ, device="cuda").expand(BATCH, SEQ)
        loss = model(tokens, positions, None, labels=torch.roll(tokens, -1, dims=1))[:, :-1].mean()
        loss.backward()
    finally:
        handle.remove()
    gradients = {name: parameter.grad.detach().clone() for name, parameter in model.named_parameters()
                 if parameter.grad is not None}
    return loss.item(), gradients, len(calls)


@pytest.mark.parametrize("force_load_balancing", [False, True], ids=["learned_routing", "force_load_balancing"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_recompute_keeps_the_gradients(megatron_runtime: None, tf32_flags_restored: None, name: str, backend: str,
                                       case: str, force_load_balancing: bool) -> None:
    from megatron.oellm.models import spec_builder

    no_tf32()
    seed = int.from_bytes(random.randbytes(4), "little")
    card = get_card(name)
    if case == "selective-shared_experts" and not card.moe_shared_expert_intermediate_size:
        pytest.skip(f"{name} has no shared expert")
    builder = spec_builder(card.family)
    settings, recomputed_module = CASES[case]
    routing = dict(moe_router_force_load_balancing=force_load_balancing)
    reseed(seed)
    stored = builder.build_model(card, backend=backend, params_dtype=torch.float32,
                                 config=builder.transformer_config(card, params_dtype=torch.float32, **routing)).cuda()
    recomputed = builder.build_model(
        card, backend=backend, params_dtype=torch.float32,
        config=builder.transformer_config(card, params_dtype=torch.float32, **routing, **settings)).cuda()
    recomputed.load_state_dict(stored.state_dict())
    tokens = torch.randint(0, card.vocab_size, (BATCH, SEQ), device="cuda")

    stored_loss, stored_gradients, stored_calls = _step(stored, tokens, seed + 1, recomputed_module(stored))
    loss, gradients, calls = _step(recomputed, tokens, seed + 1, recomputed_module(recomputed))

    print(f"\n{name} ({backend}, {case}, {'forced' if force_load_balancing else 'learned'} routing) seed {seed}: "
          f"loss {stored_loss:.6f} / {loss:.6f}")
    assert (stored_calls, calls) == (1, 2), "the case's module must run once without recompute and twice with it"
    assert loss == pytest.approx(stored_loss, rel=1e-6)
    assert gradients.keys() == stored_gradients.keys()
    assert len(gradients) == sum(1 for _ in recomputed.parameters()), "every parameter gets a gradient"
    errors = {key: ((gradients[key] - stored_gradients[key]).norm() / stored_gradients[key].norm().clamp_min(1e-30)
                    ).item() for key in gradients}
    worst = max(errors, key=errors.get)
    print("  largest gradient errors: " + ", ".join(f"{key} {errors[key]:.1e}"
                                                   for key in sorted(errors, key=errors.get)[-3:]))
    bound = GRADIENT_BOUND if card.linear_mixer == "none" else GDN_GRADIENT_BOUND
    assert errors[worst] <= bound, f"largest gradient relative L2 error {errors[worst]:.2e} at {worst} (seed {seed})"
