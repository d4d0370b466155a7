"""Reference-side helpers of the GPU parity tests: fresh random transformers models and error measures."""

from __future__ import annotations

import contextlib
import copy
import random
import sys
from collections.abc import Callable, Iterator, Sequence

import torch

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.family import family_module
from megatron.oellm.layers.gated_delta_rule_reference import gated_delta_rule_reference


def errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float, float]:
    """(relative L2, max |diff| / max |ref|, mean |diff| / mean |ref|) of ``actual`` against ``expected``, in fp64."""
    a, e = actual.detach().double().flatten(), expected.detach().double().flatten()
    diff = (a - e).abs()
    return ((a - e).norm() / e.norm()).item(), (diff.max() / e.abs().max()).item(), \
        (diff.mean() / e.abs().mean()).item()


def fresh_seed() -> int:
    """A seed for a test's torch generators, drawn from Python's generator, which ``conftest.py`` seeds per test from
    the session's seed (``OELLM_TEST_SEED``, named in the run's first and last lines): new each session, and the same
    again under that seed. Printed, so a failure's log shows the draw."""
    seed = random.getrandbits(32)
    print(f"\nseed {seed}")
    return seed


def random_hf_model(card: ModelCard, dtype: torch.dtype, device: str = "cuda") -> torch.nn.Module:
    """A freshly initialised transformers model of ``card`` on ``device`` with perturbed 1-D parameters."""
    from transformers import AutoModelForCausalLM

    hf_config = family_module(card).hf_config_from_card(card)
    hf_config._attn_implementation = "sdpa"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def float64_gated_delta_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, scale: float | None = None, initial_state: torch.Tensor | None = None,
                             output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                             cu_seqlens: torch.Tensor | None = None, **_: object,
                             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The chunked-rule call of transformers' and megatron-core's GDN layers, answered by the token-by-token
    float64 recurrence of :mod:`megatron.oellm.layers.gated_delta_rule_reference` (autograd through it gives
    float64 gradients). Packed sequences (``cu_seqlens``) are refused: the recurrence would run across them. Other
    keyword arguments are the ones transformers' layer passes through to any kernel (none changes the rule)."""
    if cu_seqlens is not None:
        raise ValueError("float64_gated_delta_rule: packed sequences (cu_seqlens) are not supported")
    out, state = gated_delta_rule_reference(
        query.double(), key.double(), value.double(), g.double(), beta.double(), scale=scale,
        initial_state=None if initial_state is None else initial_state.double(), qk_l2norm=use_qk_l2norm_in_kernel)
    return out.to(value.dtype), state.to(value.dtype) if output_final_state else None


@contextlib.contextmanager
def float64_rule(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block, ``model``'s gated-delta-rule layers run :func:`float64_gated_delta_rule` instead of the
    chunked kernels transformers dispatches to (fla's when installed: TF32 dot products even for fp32 inputs).
    Raises ValueError for a model whose modelling module has no chunked rule (no GDN layers)."""
    module = sys.modules[type(model).__module__]
    dispatched = getattr(module, "torch_chunk_gated_delta_rule", None)
    if dispatched is None:
        raise ValueError(f"{type(model).__name__} has no gated-delta-rule layers to run in float64")
    module.torch_chunk_gated_delta_rule = float64_gated_delta_rule
    try:
        yield
    finally:
        module.torch_chunk_gated_delta_rule = dispatched


def float64_rule_gradients(hf: torch.nn.Module, tokens: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """Gradients of the causal-LM loss on ``tokens`` for the parameters ``names`` of a copy of ``hf`` whose
    gated-delta-rule layers run the float64 recurrence (:func:`float64_rule`)."""
    reference = copy.deepcopy(hf)
    reference.zero_grad(set_to_none=True)
    with float64_rule(reference):
        reference(input_ids=tokens, labels=tokens).loss.backward()
    parameters = dict(reference.named_parameters())
    gradients = {name: parameters[name].grad.detach().clone() for name in names}
    del reference, parameters
    torch.cuda.empty_cache()
    return gradients


@contextlib.contextmanager
def captured_routing(mcore: torch.nn.Module, batch: int) -> Iterator[list[torch.Tensor]]:
    """Inside the block, every megatron-core router of ``mcore`` appends its routing decisions to the yielded list,
    in layer order: a ``[batch * seq, experts]`` boolean map with tokens in transformers' (batch-major) order
    (megatron's own order is sequence-major)."""
    from megatron.core.transformer.moe.router import TopKRouter

    maps: list[torch.Tensor] = []

    def record(_module: torch.nn.Module, _inputs: tuple, output: tuple[torch.Tensor, torch.Tensor]) -> None:
        routing_map = output[1]
        maps.append(routing_map.reshape(-1, batch, routing_map.shape[-1]).transpose(0, 1)
                    .reshape(-1, routing_map.shape[-1]).detach().clone())

    handles = [module.register_forward_hook(record) for module in mcore.modules() if isinstance(module, TopKRouter)]
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()


def transformers_routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The MoE routers of transformers' ``model``, in layer order."""
    return [module for module in model.modules() if type(module).__name__.endswith("TopKRouter")]


@contextlib.contextmanager
def router_records(model: torch.nn.Module, record: Callable[[torch.nn.Module, tuple], object]
                   ) -> Iterator[list[object]]:
    """Inside the block, each MoE router of transformers' ``model`` appends ``record(router, its output)`` to the
    yielded list on every forward, in layer order."""
    records: list[object] = []
    handles = [router.register_forward_hook(lambda module, _inputs, output: records.append(record(module, output)))
               for router in transformers_routers(model)]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


def smallest_router_margin(model: torch.nn.Module) -> contextlib.AbstractContextManager[list[float]]:
    """Inside the block, each MoE router of transformers' ``model`` appends to the yielded list its smallest gap
    between a token's k-th and (k+1)-th largest router logit: how far the closest expert choice is from a tie, which
    rounding differences between two correct implementations can flip."""

    def margin(module: torch.nn.Module, output: tuple) -> float:
        ranked = output[0].detach().topk(module.top_k + 1, dim=-1).values
        return (ranked[:, -2] - ranked[:, -1]).min().item()

    return router_records(model, margin)


class RouterTieError(RuntimeError):
    """No token draw keeps a model's expert choices clear of ties: some weight draws route close to ties on most
    inputs (one fresh tiny Qwen3.5 in the H200 run of session 20 had every draw's smallest margin at 2e-6 to 8e-5),
    so a caller may draw the model again."""


def tokens_clear_of_router_ties(model: torch.nn.Module, vocab_size: int, shape: tuple[int, ...], margin: float,
                                attempts: int = 30,
                                variants: Sequence[Callable[[], contextlib.AbstractContextManager]] = (
                                    contextlib.nullcontext,)) -> tuple[torch.Tensor, float]:
    """Random tokens (on ``model``'s device) on which every expert choice of transformers' ``model`` is at least
    ``margin`` (router logits) from a tie, and that smallest margin; draws again otherwise, up to ``attempts`` times.
    Each of ``variants`` (context-manager factories, e.g. ``lambda: float64_rule(model)``) is one forward the margin is
    taken under: a comparison made under another kernel routes on that kernel's logits.

    At a near-tie two correct implementations choose different experts as soon as their rounding differs by more than
    the gap (TF32 GEMMs upstream of the router are enough), and the comparison then measures the coin toss, not the
    model; ``margin`` must exceed the logit error of the side compared."""
    if not transformers_routers(model):
        raise ValueError(f"{type(model).__name__} has no MoE router: there is no expert choice to keep from a tie")
    device = next(model.parameters()).device
    smallest = []
    for _ in range(attempts):
        tokens = torch.randint(0, vocab_size, shape, device=device)
        margins: list[float] = []
        for variant in variants:
            with torch.no_grad(), variant(), smallest_router_margin(model) as found:
                model(input_ids=tokens)
            margins += found
        smallest.append(min(margins))
        if smallest[-1] >= margin:
            return tokens, smallest[-1]
    raise RouterTieError(f"no draw of {attempts} random token sets keeps every router decision {margin:g} from a tie "
                         f"(smallest margins {', '.join(f'{m:.1e}' for m in smallest)}): lower the margin")


FP32_MODEL_DRAWS = 3
"""Fresh fp32 models :func:`fp32_model_and_tokens` draws before it gives up on clearing the router ties."""


def fp32_model_and_tokens(card: ModelCard, shape: tuple[int, ...], margin: float, *, with_float64_rule: bool
                          ) -> tuple[torch.nn.Module, torch.Tensor]:
    """A random fp32 transformers model of ``card`` and tokens of ``shape`` on which its expert choices are at least
    ``margin`` from a tie (:func:`tokens_clear_of_router_ties`), with the float64 gated delta rule too where
    ``with_float64_rule`` (:func:`float64_rule`), drawing the model again when one routes near ties on every token
    draw (the GPU parity tests' fp32 cases)."""
    draw = 1
    while True:
        hf = random_hf_model(card, torch.float32)
        variants = (contextlib.nullcontext, lambda model=hf: float64_rule(model)) if with_float64_rule else (
            contextlib.nullcontext,)
        try:
            tokens, smallest = tokens_clear_of_router_ties(hf, card.vocab_size, shape, margin, variants=variants)
        except RouterTieError as error:
            if draw == FP32_MODEL_DRAWS:
                raise
            print(f"model draw {draw}: {error}; drawing the model again")
            draw += 1
            continue
        print(f"smallest top-k router-logit margin {smallest:.2e} (model draw {draw})")
        return hf, tokens


def own_routing(model: torch.nn.Module) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
    """Inside the block, each MoE router of transformers' ``model`` appends its choices to the yielded list as a
    ``[tokens, experts]`` boolean map (the form :func:`forced_routing` takes)."""
    return router_records(model, lambda _module, output: torch.zeros_like(output[0], dtype=torch.bool)
                          .scatter_(-1, output[2], True))


@contextlib.contextmanager
def forced_routing(hf: torch.nn.Module, maps: list[torch.Tensor]) -> Iterator[None]:
    """Inside the block, the MoE routers of transformers' ``hf`` choose the experts of ``maps`` (one per MoE
    layer, in layer order, from :func:`captured_routing`) instead of their own top-k; the weights of the chosen
    experts are still their own softmax scores, renormalised as the model's ``norm_topk_prob`` (or always, for the
    Qwen3.5 router) says. Only the discrete choice is shared: the continuous routing computation stays transformers'.
    """
    routers = transformers_routers(hf)
    if len(routers) != len(maps):
        raise ValueError(f"{len(maps)} routing maps for {len(routers)} transformers routers")
    for router, chosen in zip(routers, maps, strict=True):
        if not bool((chosen.sum(-1) == router.top_k).all()):
            raise ValueError(f"a routing map does not choose exactly top_k={router.top_k} experts per token")

    def force(chosen: torch.Tensor):
        def hook(module: torch.nn.Module, _inputs: tuple, output: tuple) -> tuple:
            router_logits = output[0]
            if chosen.shape != router_logits.shape:
                raise ValueError(f"routing map {tuple(chosen.shape)} for router logits {tuple(router_logits.shape)}")
            indices = chosen.float().topk(module.top_k, dim=-1).indices  # the k True entries of each row
            scores = torch.softmax(router_logits, dim=-1, dtype=torch.float).gather(-1, indices)
            if getattr(module, "norm_topk_prob", True):
                scores = scores / scores.sum(dim=-1, keepdim=True)
            return router_logits, scores.to(router_logits.dtype), indices
        return hook

    handles = [router.register_forward_hook(force(chosen)) for router, chosen in zip(routers, maps, strict=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
