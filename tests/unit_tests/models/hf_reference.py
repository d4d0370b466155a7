"""Reference-side helpers of the GPU parity tests: fresh random transformers models and error measures."""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator

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
    """A new seed each run (printed, so a failure can be replayed)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"\nseed {seed}")
    return seed


def random_hf_model(card: ModelCard, dtype: torch.dtype) -> torch.nn.Module:
    """A freshly initialised transformers model of ``card`` on the GPU with perturbed 1-D parameters."""
    from transformers import AutoModelForCausalLM

    hf_config = family_module(card).hf_config_from_card(card)
    hf_config._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def float64_gated_delta_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, initial_state: torch.Tensor | None = None,
                             output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                             **_: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The chunked-rule call of transformers' GDN layer, answered by the token-by-token float64 recurrence of
    :mod:`megatron.oellm.layers.gated_delta_rule_reference` (autograd through it gives float64 gradients)."""
    out, state = gated_delta_rule_reference(
        query.double(), key.double(), value.double(), g.double(), beta.double(),
        initial_state=None if initial_state is None else initial_state.double(), qk_l2norm=use_qk_l2norm_in_kernel)
    return out.to(value.dtype), state.to(value.dtype) if output_final_state else None


@contextlib.contextmanager
def float64_rule(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block, ``model``'s gated-delta-rule layers run :func:`float64_gated_delta_rule` instead of the
    chunked kernels transformers dispatches to (fla's when installed: TF32 dot products even for fp32 inputs). A
    model family without the rule is unchanged."""
    module = sys.modules[type(model).__module__]
    dispatched = getattr(module, "torch_chunk_gated_delta_rule", None)
    if dispatched is None:
        yield
        return
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
