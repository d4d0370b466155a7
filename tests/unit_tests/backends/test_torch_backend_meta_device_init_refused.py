"""``--init-model-with-meta-device`` on the torch-native backend is refused before Megatron initialises: megatron
builds the model under ``torch.device('meta')``, which an explicit device overrides, and the torch-native norms and
stacked experts (like megatron-core's own parallel linears, which this backend uses) allocate on the CPU or the current
CUDA device explicitly, so the model would not be on the meta device (whole expert weights on every GPU)."""

from __future__ import annotations

import pytest
import torch
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends import selection
from megatron.oellm.backends.torch_native.norms import RMSNorm

MESSAGE = r"--init-model-with-meta-device \(.*\): drop it"


def _config(**fields) -> TransformerConfig:
    """A small RMSNorm config without TE-only fusions."""
    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                             gradient_accumulation_fusion=False, **fields)


def test_the_torch_native_norm_ignores_the_meta_device() -> None:
    """Why: under megatron's ``torch.device('meta')`` the norm's weight is not a meta tensor."""
    with torch.device("meta"):
        norm = RMSNorm(_config(use_cpu_initialization=True), 64)
    assert not norm.weight.is_meta


def test_the_torch_backend_refuses_meta_device_initialisation() -> None:
    with pytest.raises(ValueError, match=MESSAGE):
        selection.check_config_support("torch", _config(init_model_with_meta_device=True))
    selection.check_config_support("torch", _config())


def test_the_torch_backend_refuses_the_megatron_flag() -> None:
    from megatron.oellm.cards import get_card
    from megatron.oellm.megatron_args import flags_to_argv, megatron_parser, model_flags

    card_argv = flags_to_argv(model_flags(get_card("qwen3-30b-a3b-tiny")))
    parser = megatron_parser()
    with pytest.raises(ValueError, match=MESSAGE):
        selection.check_args_support("torch", parser.parse_args([*card_argv, "--init-model-with-meta-device"]))
    selection.check_args_support("torch", parser.parse_args(card_argv))


def test_the_te_backend_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transformer Engine's modules allocate on the meta device under this setting."""
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)
    selection.check_backend_support("te", meta_device_init=True)
