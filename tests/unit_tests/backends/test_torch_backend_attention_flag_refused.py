"""``--attention-backend`` other than auto on the torch-native backend is refused before Megatron initialises: its
core attention (:mod:`megatron.oellm.backends.torch_native.attention`) runs SDPA / varlen attention whatever the flag
says, so a run asking for flash, fused, unfused or local attention would silently run another kernel."""

from __future__ import annotations

import random

import pytest
from megatron.core.transformer.enums import AttnBackend
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends import selection
from megatron.oellm.recipes.local import machine_adjustments

OTHERS = [backend for backend in AttnBackend if backend != AttnBackend.auto]


def _config(attention_backend: AttnBackend) -> TransformerConfig:
    """A small RMSNorm config without TE-only fusions, attending with ``attention_backend``."""
    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                             gradient_accumulation_fusion=False, attention_backend=attention_backend)


@pytest.mark.parametrize("backend", OTHERS, ids=lambda backend: backend.name)
def test_the_torch_backend_refuses_another_attention_backend(backend: AttnBackend) -> None:
    with pytest.raises(ValueError, match=rf"--attention-backend {backend.name} \(.*SDPA / varlen.*use "
                                         r"--attention-backend auto"):
        selection.check_config_support("torch", _config(backend))


def test_the_torch_backend_takes_auto() -> None:
    selection.check_config_support("torch", _config(AttnBackend.auto))


def test_the_entry_refuses_it_before_megatron_initialises() -> None:
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    backend = random.choice(OTHERS).name
    extra = ["--spec", "local"] if backend == "local" else []
    args = validate_on_cluster(["--oellm-model", "qwen3-30b-a3b-tiny", "--micro-batch-size", "1",
                                "--global-batch-size", "8", "--seq-length", "128", "--bf16",
                                "--attention-backend", backend, *extra], 1, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    with pytest.raises(ValueError, match=f"--attention-backend {backend} "):
        selection.check_args_support("torch", args)


def test_a_local_recipe_run_on_the_torch_backend_attends_with_auto() -> None:
    """``oellm recipe --local`` on the torch backend runs a row's ``flash`` (the MN5 base's) with ``auto``."""
    backend = random.choice(OTHERS).name
    changes = machine_adjustments({"oellm-backend": "torch", "attention-backend": backend, "bf16": True}, {})
    assert changes["attention-backend"][0] == "auto" and "SDPA / varlen" in changes["attention-backend"][1]
    assert machine_adjustments({"oellm-backend": "torch", "attention-backend": "auto"}, {}) == {}
