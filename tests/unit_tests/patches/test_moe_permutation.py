"""The MoE permutation patch against megatron-core 0.19.2's own ``permute`` / ``unpermute`` (CPU, fp32): the same
outputs, indices, probabilities and gradients for dropless top-k and capacity (drop-and-pad) routing; fused calls and
probability merging left to upstream; the wrappers take upstream's arguments; the version guard and the opt-out; and,
since the comparisons pass with a patch that does nothing, that megatron-core's dispatcher moves the tokens through
this package's ``gather_rows`` and ``scatter_sum_rows``.

Skipped for another megatron-core release, the patch says so, as the other runtime patches do: the run would otherwise
lose the sorted permutation (its speed and determinism) with only ``MoE permutation upstream`` in the start-up line and
no reason."""

import inspect
import random
import warnings
from types import SimpleNamespace

import pytest
import torch
from megatron.core.transformer.moe import moe_utils, token_dispatcher

from megatron.oellm.patches import moe_permutation
from megatron.oellm.patches.moe_permutation import _permute_without_atomics, _unpermute_without_atomics
from tests.unit_tests.models.hf_reference import fresh_seed
from tests.unit_tests.triton_interpreter import INTERPRETING

patched_permute = _permute_without_atomics(moe_utils.permute)
patched_unpermute = _unpermute_without_atomics(moe_utils.unpermute)


def top_k_routing(num_tokens: int, num_experts: int, top_k: int, hidden: int, seed: int):
    """Tokens, a routing map with ``top_k`` experts per token, and fp32 probabilities on the chosen experts."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=generator)
    chosen = scores.topk(top_k, dim=1).indices
    routing_map = torch.zeros(num_tokens, num_experts, dtype=torch.bool).scatter_(1, chosen, True)
    probs = torch.where(routing_map, scores, torch.zeros(()))
    tokens = torch.randn(num_tokens, hidden, generator=generator)
    return tokens, routing_map, probs


def permute_and_back(permute, unpermute, tokens, routing_map, probs, **options):
    """Permute, scale each row by its probability and a fixed per-row factor, unpermute; return the outputs and the
    gradients of the tokens and probabilities for a fixed upstream gradient."""
    tokens = tokens.clone().requires_grad_()
    probs = probs.clone().requires_grad_()
    rows, row_probs, indices, _, _ = permute(tokens, routing_map, probs=probs, **options)
    factor = torch.linspace(0.5, 1.5, rows.shape[0], device=rows.device)[:, None]
    out = unpermute(rows * row_probs[:, None] * factor, indices, tokens.shape, routing_map=routing_map,
                    drop_and_pad=options.get("drop_and_pad", False))
    out.backward(torch.linspace(-1, 1, out.numel(), device=out.device).view(out.shape))
    return rows, row_probs, indices, out, tokens.grad, probs.grad


def assert_same_as_upstream(ours: tuple, theirs: tuple, tolerance: float) -> None:
    """:func:`permute_and_back` results: the moved rows, their probabilities and the indices bit for bit, the output
    and both gradients within ``tolerance`` (only the order of the additions differs)."""
    for name, got, want in zip(("rows", "row probs", "indices"), ours[:3], theirs[:3], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
    for name, got, want in zip(("output", "token grad", "prob grad"), ours[3:], theirs[3:], strict=True):
        torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance, msg=name)


@pytest.mark.parametrize("drop_and_pad", [False, True])
def test_patched_permutation_gives_upstreams_results_and_gradients(drop_and_pad: bool):
    tokens, routing_map, probs = top_k_routing(37, 6, 2, 16, fresh_seed())
    if drop_and_pad:  # capacity 10 per expert: some experts drop tokens, others are padded with repeats
        options = dict(num_out_tokens=6 * 10, drop_and_pad=True)
    else:
        options = dict(num_out_tokens=37 * 2)
    ours = permute_and_back(patched_permute, patched_unpermute, tokens, routing_map, probs, **options)
    theirs = permute_and_back(moe_utils.permute, moe_utils.unpermute, tokens, routing_map, probs, **options)
    assert_same_as_upstream(ours, theirs, tolerance=1e-6)
    assert ours[4].abs().sum() > 0 and ours[5].abs().sum() > 0


def test_the_all_gather_and_deepep_calls_give_upstreams_results():
    """The all-gather dispatcher's call (no probabilities) and DeepEP's (``tokens_per_expert`` and ``align_size``
    passed through), bf16 tokens and an expert with no tokens."""
    tokens, routing_map, probs = top_k_routing(25, 5, 2, 12, fresh_seed())
    routing_map[:, 4] = False
    routing_map[:, 0] = True
    counts = routing_map.sum(dim=0)
    tokens = tokens.bfloat16()
    calls = (dict(num_out_tokens=int(counts.sum())),
             dict(probs=probs, num_out_tokens=int(counts.sum()), tokens_per_expert=counts, align_size=16))
    for options in calls:
        ours = patched_permute(tokens, routing_map, **options)
        theirs = moe_utils.permute(tokens, routing_map, **options)
        for got, want in zip(ours, theirs, strict=True):
            assert (got is None and want is None) or torch.equal(got, want)
        back = dict(restore_shape=tokens.shape, routing_map=routing_map)
        torch.testing.assert_close(patched_unpermute(ours[0], ours[2], **back),
                                   moe_utils.unpermute(theirs[0], theirs[2], **back), rtol=1e-2, atol=1e-2)


def test_the_log_names_the_permutation_a_model_runs(monkeypatch):
    monkeypatch.delenv(moe_permutation.UPSTREAM_ENV, raising=False)
    describe = moe_permutation.describe
    assert describe(None, False, "alltoall") == "none" and describe(0, False, "alltoall") == "none"
    assert describe(128, True, "alltoall") == "fused"
    assert describe(128, False, "flex", "hybridep") == "in the hybridep dispatcher"
    assert describe(128, False, "flex", "ncclep") == "in the ncclep dispatcher"  # _NCCLEPManager calls no permute
    assert describe(128, False, "flex", "deepep") == describe(128, False, "allgather") == "sorted"
    monkeypatch.setattr(moe_permutation, "is_applied", lambda: False)
    monkeypatch.setenv(moe_permutation.UPSTREAM_ENV, "1")
    assert describe(128, False, "alltoall") == "upstream"


def test_merging_probabilities_and_fused_calls_stay_upstreams():
    tokens, routing_map, probs = top_k_routing(12, 4, 2, 8, fresh_seed())
    rows, _, indices, _, _ = moe_utils.permute(tokens, routing_map, num_out_tokens=24)
    merged = dict(probs=probs, routing_map=routing_map)
    torch.testing.assert_close(patched_unpermute(rows, indices, tokens.shape, **merged),
                               moe_utils.unpermute(rows, indices, tokens.shape, **merged), rtol=0, atol=0)
    calls = []

    def upstream(*args, **kwargs):
        calls.append((args, kwargs))
        return "upstream's result"

    assert _permute_without_atomics(upstream)(tokens, routing_map, num_out_tokens=24, fused=True) == "upstream's result"
    assert calls[-1][0][0] is tokens and calls[-1][1]["fused"] is True
    pad_offsets = torch.zeros(4, dtype=torch.long)
    for options in (dict(fused=True), dict(pad_offsets=pad_offsets)):
        assert _unpermute_without_atomics(upstream)(rows, indices, tokens.shape, **options) == "upstream's result"
        assert calls[-1][0][0] is rows


def test_apply_wraps_the_dispatchers_names_once_and_honours_the_guard_and_the_opt_out(monkeypatch):
    monkeypatch.setattr(token_dispatcher, "permute", moe_utils.permute)
    monkeypatch.setattr(token_dispatcher, "unpermute", moe_utils.unpermute)
    monkeypatch.setenv(moe_permutation.UPSTREAM_ENV, "1")
    assert not moe_permutation.apply() and moe_permutation.describe(8, False, "alltoall") == "upstream"
    assert token_dispatcher.permute is moe_utils.permute
    monkeypatch.delenv(moe_permutation.UPSTREAM_ENV)
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: "0.20.0")
    assert not moe_permutation.apply() and not moe_permutation.is_applied()
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: "0.19.2")
    assert moe_permutation.apply() and moe_permutation.apply() and moe_permutation.is_applied()
    assert token_dispatcher.permute.__wrapped__ is moe_utils.permute
    assert token_dispatcher.unpermute.__wrapped__ is moe_utils.unpermute


@pytest.mark.parametrize("name", ["permute", "unpermute"])
def test_the_permutation_wrappers_take_upstreams_arguments(name):
    """The dispatchers pass keyword arguments by upstream's names: the wrappers' parameters must be the same (names,
    order, kinds and defaults)."""
    original = getattr(moe_utils, name)
    wrap = {"permute": moe_permutation._permute_without_atomics,
            "unpermute": moe_permutation._unpermute_without_atomics}[name]
    ours = inspect.signature(wrap(original), follow_wrapped=False).parameters
    theirs = inspect.signature(original).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.values()]


@pytest.fixture
def upstream_dispatcher(monkeypatch):
    """The dispatchers call upstream's functions during the test (a patch applied earlier in the process is undone
    by monkeypatch afterwards), and the opt-out is unset."""
    monkeypatch.setattr(token_dispatcher, "permute", moe_utils.permute)
    monkeypatch.setattr(token_dispatcher, "unpermute", moe_utils.unpermute)
    monkeypatch.delenv(moe_permutation.UPSTREAM_ENV, raising=False)


def another_release() -> str:
    """A random release that is not 0.19.2."""
    return f"0.{random.randint(20, 40)}.{random.randint(0, 9)}"


def test_another_release_keeps_upstream_and_warns_naming_the_release_and_the_note(upstream_dispatcher, monkeypatch):
    release = another_release()
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: release)
    with pytest.warns(RuntimeWarning, match=rf"megatron-core {release} is not 0\.19\.2.*"
                                            r"patches/moe-permutation-without-atomics\.md"):
        assert not moe_permutation.apply()
    assert token_dispatcher.permute is moe_utils.permute and token_dispatcher.unpermute is moe_utils.unpermute


def test_the_opt_out_and_the_patched_release_do_not_warn(upstream_dispatcher, monkeypatch):
    """``OELLM_UPSTREAM_MOE_PERMUTATION=1`` is the user's own choice (the doctor warns about it), and 0.19.2 applies."""
    release = another_release()
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: release)
    monkeypatch.setenv(moe_permutation.UPSTREAM_ENV, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert not moe_permutation.apply()
        monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: "0.19.2")
        assert not moe_permutation.apply()
        monkeypatch.delenv(moe_permutation.UPSTREAM_ENV)
        assert moe_permutation.apply() and moe_permutation.apply()
    assert token_dispatcher.permute.__wrapped__ is moe_utils.permute


class Spy:
    """Records each call of ``function`` and its result, and returns that result."""

    def __init__(self, function):
        self.function = function
        self.calls: list[tuple[tuple, object]] = []

    def __call__(self, *args):
        result = self.function(*args)
        self.calls.append((args, result))
        return result


def all_gather_dispatcher(num_experts: int, top_k: int) -> token_dispatcher.MoEAllGatherTokenDispatcher:
    """megatron-core's all-gather dispatcher on one rank (no process groups: TP = EP = 1), unfused, all experts
    local."""
    config = SimpleNamespace(moe_router_topk=top_k, add_bias_linear=False, moe_permute_fusion=False)
    groups = SimpleNamespace(ep=None, expt_tp=None, tp_ep=None)
    return token_dispatcher.MoEAllGatherTokenDispatcher(num_experts, list(range(num_experts)), config, groups)


def dispatch_and_combine(dispatcher, hidden_states, routing_map, probs, out_grad):
    """The dispatcher's steps around the experts, as megatron-core's MoE layer calls them (each permuted row scaled by
    its probability in between), then the backward of ``out_grad``. Returns the permuted rows, the combined output
    and the gradient of ``hidden_states``."""
    hidden_states = hidden_states.detach().requires_grad_()
    tokens, probs = dispatcher.dispatch_preprocess(hidden_states, routing_map, probs)
    tokens, probs = dispatcher.token_dispatch(tokens, probs)
    rows, _, row_probs = dispatcher.dispatch_postprocess(tokens, probs)
    out = dispatcher.combine_preprocess(rows * row_probs[:, None].to(rows.dtype))
    out = dispatcher.combine_postprocess(dispatcher.token_combine(out))
    out.backward(out_grad)
    return rows, out, hidden_states.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_dispatchers_unfused_calls_move_the_tokens_by_the_sorted_sum(upstream_dispatcher, monkeypatch, dtype):
    """Applied, the names megatron-core's dispatchers look up at call time move the tokens by ``gather_rows`` and add
    them back by ``scatter_sum_rows``. The comparisons with upstream cannot tell a patch that does nothing: on the CPU
    upstream's ``index_select`` backward and ``scatter_add_`` accumulate bf16 in fp32 and round once as well (checked
    up to 200,000 rows per token sum), so no CPU input makes the two differ, and only the calls show the patch ran."""
    seed = fresh_seed()
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: "0.19.2")
    gather, scatter = Spy(moe_permutation.gather_rows), Spy(moe_permutation.scatter_sum_rows)
    monkeypatch.setattr(moe_permutation, "gather_rows", gather)
    monkeypatch.setattr(moe_permutation, "scatter_sum_rows", scatter)
    assert moe_permutation.apply()
    num_tokens, num_experts, top_k, hidden = 4 * random.randint(3, 12), random.randint(2, 8), 2, 16
    tokens, routing_map, probs = top_k_routing(num_tokens, num_experts, top_k, hidden, seed)
    hidden_states = tokens.view(4, num_tokens // 4, hidden).to(dtype)
    run = (hidden_states, routing_map, probs, torch.randn_like(hidden_states))
    rows, out, grad = dispatch_and_combine(all_gather_dispatcher(num_experts, top_k), *run)
    assert len(gather.calls) == 1 and len(scatter.calls) == 1
    assert torch.equal(gather.calls[0][0][0], hidden_states.view(num_tokens, hidden)) and gather.calls[0][1] is rows
    assert scatter.calls[0][1].data_ptr() == out.data_ptr() and out.shape == hidden_states.shape
    monkeypatch.setattr(token_dispatcher, "permute", moe_utils.permute)
    monkeypatch.setattr(token_dispatcher, "unpermute", moe_utils.unpermute)
    _, theirs, their_grad = dispatch_and_combine(all_gather_dispatcher(num_experts, top_k), *run)
    assert len(gather.calls) == 1 and len(scatter.calls) == 1
    # top 2: two adds, in either order the same; Triton's interpreter (the layers' re-run) stores bf16 by truncation
    bound = dict(rtol=2**-7, atol=1e-6) if INTERPRETING and dtype == torch.bfloat16 else dict(rtol=0, atol=0)
    torch.testing.assert_close(out, theirs, **bound)
    torch.testing.assert_close(grad, their_grad, **bound)


@pytest.mark.parametrize("card_name", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_building_a_models_moe_layer_spec_applies_the_patch(upstream_dispatcher, monkeypatch, card_name):
    """The spec builders' MoE layer applies the patch itself, so every MoE model built here (training entry, bench,
    parity tests) permutes without atomic adds on 0.19.2, whoever builds it."""
    from megatron.oellm.backends.torch_native.provider import TorchNativeSpecProvider
    from megatron.oellm.cards import get_card
    from megatron.oellm.models.building_blocks import moe_builder

    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: "0.19.2")
    assert token_dispatcher.permute is moe_utils.permute
    moe_builder(TorchNativeSpecProvider(), get_card(card_name))
    assert moe_permutation.is_applied()
    assert token_dispatcher.permute.__wrapped__ is moe_utils.permute
    assert token_dispatcher.unpermute.__wrapped__ is moe_utils.unpermute


@pytest.mark.gpu
@pytest.mark.parametrize("drop_and_pad", [False, True])
def test_patched_permutation_on_the_gpu_gives_upstreams_results_and_gradients(drop_and_pad: bool):
    """The same comparison with CUDA tensors, so the Triton kernel runs in both directions (fp32: the two differ
    only in the order of the additions)."""
    tokens, routing_map, probs = (t.cuda() for t in top_k_routing(4096, 64, 8, 256, fresh_seed()))
    options = dict(num_out_tokens=64 * 600, drop_and_pad=True) if drop_and_pad else dict(num_out_tokens=4096 * 8)
    ours = permute_and_back(patched_permute, patched_unpermute, tokens, routing_map, probs, **options)
    theirs = permute_and_back(moe_utils.permute, moe_utils.unpermute, tokens, routing_map, probs, **options)
    assert_same_as_upstream(ours, theirs, tolerance=1e-5)
