"""Reference-side helpers of the GPU parity tests: fresh random transformers models and error measures."""

from __future__ import annotations

import os

import torch

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.family import family_module


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
