"""The reference-side tools of the GPU parity tests, on the CPU with small random transformers models: the float64
gated-delta-rule recurrence agrees with transformers' own torch implementation of the chunked rule, and forcing the
MoE routers' expert choices reproduces the model exactly when the choices are its own and changes it when not; tokens
drawn clear of router ties are as far from a tie as promised; a printed seed can be replayed."""

from __future__ import annotations

import contextlib
import copy
import random
import sys

import pytest
import torch

from megatron.oellm.cards import get_card
from tests.unit_tests.models import hf_reference
from tests.unit_tests.models.hf_reference import (
    RouterTieError,
    errors,
    float64_gated_delta_rule,
    float64_rule,
    forced_routing,
    fp32_model_and_tokens,
    fresh_seed,
    own_routing,
    random_hf_model,
    tokens_clear_of_router_ties,
    transformers_routers,
)

pytest.importorskip("transformers")

BATCH, SEQ = 2, 40


def cpu_hf_model(name: str, seed: int) -> torch.nn.Module:
    """A random fp32 transformers model of card ``name`` on the CPU, 1-D parameters perturbed."""
    torch.manual_seed(seed)
    return random_hf_model(get_card(name), torch.float32, "cpu")


def the_exact_rule_when_gdn(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """The float64 rule for GDN models (fla's kernels need a GPU; :func:`float64_rule` refuses other models),
    nothing for the others."""
    return float64_rule(model) if hasattr(sys.modules[type(model).__module__], "torch_chunk_gated_delta_rule") \
        else contextlib.nullcontext()


def transformers_torch_rule(dispatched) -> object:
    """transformers' torch implementation of the chunked rule behind ``dispatched`` (its module's
    ``torch_chunk_gated_delta_rule``): the ``__wrapped__`` of transformers' fallback wrapper, which transformers
    with the ``kernels`` package (a dependency from 5.2x on) wraps once more, in a hub-kernel ``nn.Module`` whose
    ``forward`` closes over it. Fails the test when neither exposes it."""
    wrappers = [dispatched]
    if isinstance(dispatched, torch.nn.Module):
        wrappers += [cell.cell_contents for cell in type(dispatched).forward.__closure__ or ()]
    for wrapper in wrappers:
        if callable(wrapper) and hasattr(wrapper, "__wrapped__"):
            return wrapper.__wrapped__
    raise AssertionError("transformers' dispatcher no longer exposes its torch rule")


def test_float64_rule_matches_transformers_torch_rule():
    model = cpu_hf_model("qwen3.5-35b-a3b-tiny", seed=11)
    module = sys.modules[type(model).__module__]
    tokens = torch.randint(0, model.config.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(3))
    names = ["model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.in_proj_a.weight",
             "model.layers.0.linear_attn.in_proj_qkv.weight"]
    outputs = {}
    dispatched = module.torch_chunk_gated_delta_rule
    torch_rule = transformers_torch_rule(dispatched)
    assert torch_rule.__name__ == "torch_chunk_gated_delta_rule"
    for label, context in (("float64", float64_rule(model)), ("torch", contextlib.nullcontext())):
        copy_ = copy.deepcopy(model)
        module.torch_chunk_gated_delta_rule = torch_rule
        try:
            with context:
                out = copy_(input_ids=tokens, labels=tokens)
                out.loss.backward()
        finally:
            module.torch_chunk_gated_delta_rule = dispatched
        parameters = dict(copy_.named_parameters())
        outputs[label] = out.logits.detach(), {n: parameters[n].grad for n in names}
    assert module.torch_chunk_gated_delta_rule is dispatched
    assert errors(outputs["float64"][0], outputs["torch"][0])[0] < 1e-5
    for name in names:
        assert errors(outputs["float64"][1][name], outputs["torch"][1][name])[0] < 1e-3, name


def test_float64_rule_shapes_and_packed_sequences_refused():
    q = torch.randn(1, 4, 2, 8)
    out, state = float64_gated_delta_rule(q, q, torch.randn(1, 4, 2, 8), -torch.rand(1, 4, 2), torch.rand(1, 4, 2),
                                          output_final_state=True)
    assert out.shape == (1, 4, 2, 8) and state.shape == (1, 2, 8, 8)
    with pytest.raises(ValueError, match="cu_seqlens"):
        float64_gated_delta_rule(q, q, q, -torch.rand(1, 4, 2), torch.rand(1, 4, 2), cu_seqlens=torch.tensor([0, 4]))


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_forcing_the_models_own_routing_reproduces_it(name):
    model = cpu_hf_model(name, seed=5)
    tokens = torch.randint(0, model.config.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), the_exact_rule_when_gdn(model):
        with own_routing(model) as maps:
            free = model(input_ids=tokens).logits
        with forced_routing(model, maps):
            forced = model(input_ids=tokens).logits
        shifted = [torch.roll(chosen, 1, dims=-1) for chosen in maps]  # every token gets other experts
        with forced_routing(model, shifted):
            other = model(input_ids=tokens).logits
    assert len(maps) == len(transformers_routers(model)) > 0
    assert errors(forced, free)[0] < 1e-6  # the same experts, summed in expert order instead of score order
    assert errors(other, free)[0] > 1e-2


def test_float64_rule_refuses_models_without_gdn_layers():
    with pytest.raises(ValueError, match="no gated-delta-rule layers"):
        with float64_rule(cpu_hf_model("qwen3-30b-a3b-tiny", seed=7)):
            pass


def test_forced_routing_refuses_maps_that_do_not_fit():
    model = cpu_hf_model("qwen3-30b-a3b-tiny", seed=6)
    routers = transformers_routers(model)
    experts = routers[0].num_experts
    with pytest.raises(ValueError, match="routing maps for"):
        with forced_routing(model, []):
            pass
    too_many = [torch.ones(BATCH * SEQ, experts, dtype=torch.bool)] * len(routers)
    with pytest.raises(ValueError, match="exactly top_k"):
        with forced_routing(model, too_many):
            pass
    too_few_tokens = [torch.zeros(BATCH * SEQ - 1, experts, dtype=torch.bool)] * len(routers)
    for chosen in too_few_tokens:
        chosen[:, :routers[0].top_k] = True
    tokens = torch.randint(0, model.config.vocab_size, (BATCH, SEQ))
    with pytest.raises(ValueError, match="routing map"), torch.no_grad(), forced_routing(model, too_few_tokens):
        model(input_ids=tokens)


def router_gaps_float64(model: torch.nn.Module, tokens: torch.Tensor) -> list[float]:
    """Each router's smallest gap between a token's k-th and (k+1)-th largest logit, computed here in float64 from
    the router's input and weight (independently of the hooks under test)."""
    gaps = []

    def record(module: torch.nn.Module, inputs: tuple) -> None:
        logits = inputs[0].reshape(-1, module.weight.shape[1]).double() @ module.weight.double().T
        ranked = logits.sort(dim=-1, descending=True).values
        gaps.append((ranked[:, module.top_k - 1] - ranked[:, module.top_k]).min().item())

    handles = [router.register_forward_pre_hook(record) for router in transformers_routers(model)]
    try:
        with torch.no_grad(), the_exact_rule_when_gdn(model):
            model(input_ids=tokens)
    finally:
        for handle in handles:
            handle.remove()
    return gaps


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_tokens_clear_of_router_ties_keep_every_choice_that_far_from_a_tie(name):
    model = cpu_hf_model(name, 5)
    card = get_card(name)
    with the_exact_rule_when_gdn(model):
        tokens, margin = tokens_clear_of_router_ties(model, card.vocab_size, (BATCH, SEQ), 3e-4)
    assert tokens.shape == (BATCH, SEQ) and 0 <= tokens.min() and tokens.max() < card.vocab_size
    gaps = router_gaps_float64(model, tokens)
    assert len(gaps) == len(transformers_routers(model))
    assert min(gaps) >= 3e-4 * (1 - 1e-4)
    assert min(gaps) == pytest.approx(margin, rel=1e-4)


@contextlib.contextmanager
def shifted_router(model: torch.nn.Module, shift: torch.Tensor):
    """Inside the block, the first MoE router of ``model`` has ``shift`` added to its weight."""
    router = transformers_routers(model)[0]
    original = router.weight.detach().clone()
    with torch.no_grad():
        router.weight.add_(shift)
    try:
        yield
    finally:
        with torch.no_grad():
            router.weight.copy_(original)


@pytest.mark.parametrize("shifted_first", [True, False])
def test_tokens_clear_of_router_ties_take_the_smallest_margin_over_the_variants(shifted_first):
    model = cpu_hf_model("qwen3-30b-a3b-tiny", 8)
    shift = 0.5 * torch.randn_like(transformers_routers(model)[0].weight)
    variants = [contextlib.nullcontext, lambda: shifted_router(model, shift)]
    if shifted_first:
        variants.reverse()
    tokens, margin = tokens_clear_of_router_ties(model, 512, (BATCH, SEQ), 1e-6, variants=variants)
    plain = min(router_gaps_float64(model, tokens))
    with shifted_router(model, shift):
        shifted = min(router_gaps_float64(model, tokens))
    # the margin is read off float32 logits: ~2e-8 from the float64 gap here (CPU GEMMs), bounded 10x above that
    float32_error = 2e-7
    assert abs(plain - shifted) > 10 * float32_error  # the variants differ, so the check below can fail
    assert margin == pytest.approx(min(plain, shifted), rel=0, abs=float32_error)


def test_tokens_clear_of_router_ties_say_when_no_draw_is():
    model = cpu_hf_model("qwen3-30b-a3b-tiny", 6)
    with pytest.raises(RuntimeError, match=r"no draw of 3 random token sets .* lower the margin"):
        tokens_clear_of_router_ties(model, 512, (BATCH, SEQ), 1.0, attempts=3)
    with pytest.raises(ValueError, match="has no MoE router"):
        tokens_clear_of_router_ties(torch.nn.Linear(2, 2), 512, (BATCH, SEQ), 1e-4)


@pytest.mark.parametrize("tied_models", [0, 2, 3])
def test_the_fp32_parity_case_draws_the_model_again_when_it_routes_near_ties(monkeypatch, tied_models):
    """A weight draw whose routers sit near ties on every token draw is replaced (up to three models): the case then
    runs on the first model with clear choices, and fails naming the margins only when every model is tied."""
    card = get_card("qwen3-30b-a3b-tiny")
    models = [cpu_hf_model(card.name, seed) for seed in range(3)]
    drawn = iter(models)
    monkeypatch.setattr(hf_reference, "random_hf_model", lambda card, dtype: next(drawn))
    margins = {id(model): (1e-6 if k < tied_models else 1.0) for k, model in enumerate(models)}

    def router_margin(model, vocab_size, shape, margin, variants):  # the real draw, with a stand-in margin per model
        if margins[id(model)] < margin:
            raise RouterTieError(f"no draw keeps every router decision {margin:g} from a tie")
        return torch.randint(0, vocab_size, shape), margins[id(model)]

    monkeypatch.setattr(hf_reference, "tokens_clear_of_router_ties", router_margin)
    if tied_models == len(models):
        with pytest.raises(RouterTieError, match="from a tie"):
            fp32_model_and_tokens(card, (BATCH, SEQ), 1e-4, with_float64_rule=False)
        return
    hf, tokens = fp32_model_and_tokens(card, (BATCH, SEQ), 1e-4, with_float64_rule=False)
    assert hf is models[tied_models] and tokens.shape == (BATCH, SEQ)


def test_fresh_seed_follows_the_tests_seeded_generator(capsys):
    """The seed comes from Python's generator, which conftest seeds per test from ``OELLM_TEST_SEED``: the same
    generator state gives the same seed (so the session's seed replays it), and successive draws differ."""
    state = random.getstate()
    first = fresh_seed()
    random.setstate(state)
    assert fresh_seed() == first
    assert f"seed {first}" in capsys.readouterr().out
    assert len({fresh_seed() for _ in range(4)}) > 1
