"""``--attention-backend local`` per backend (CPU only): the te backend refuses it, from the config and from the
entry's argument check before Megatron initialises; the torch-native backend refuses it as every value but auto
(test_torch_backend_attention_flag_refused.py). Each refusal test fails if
the te backend lets ``local`` through."""

import pytest
from megatron.core.transformer.enums import AttnBackend
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends import selection


@pytest.fixture
def te_with_apex(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend Transformer Engine imports and apex's weight-gradient fusion is there (no other te refusal)."""
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)


def _config(**overrides: object) -> TransformerConfig:
    """A small RMSNorm config with ``overrides``."""
    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                             **overrides)


def test_te_backend_refuses_local_attention(te_with_apex: None) -> None:
    """``--attention-backend local`` (with Megatron's required ``--spec local``) sets every TE attention switch to 0,
    but the spec builders take core attention from TE: the first forward pass would find no attention backend,
    after the model is allocated."""
    with pytest.raises(ValueError, match=r"attention_backend=local.*--attention-backend unfused"):
        selection.check_config_support("te", _config(attention_backend=AttnBackend.local))
    for backend in (AttnBackend.auto, AttnBackend.unfused, AttnBackend.fused):
        selection.check_config_support("te", _config(attention_backend=backend))


def test_entry_refuses_local_attention_on_te_before_megatron_initialises(te_with_apex: None) -> None:
    """The entry's argument check sees the same refusal."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    args = validate_on_cluster(
        ["--oellm-model", "qwen3-30b-a3b-tiny", "--micro-batch-size", "1", "--global-batch-size", "8",
         "--seq-length", "128", "--bf16", "--attention-backend", "local", "--spec", "local"],
        1, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    )
    with pytest.raises(ValueError, match=r"attention_backend=local"):
        selection.check_args_support("te", args)
