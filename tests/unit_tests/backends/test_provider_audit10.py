"""The torch-native build, checked where the earlier tests of :class:`TorchNativeSpecProvider` and of the models'
loss (``megatron/oellm/models/language_model.py``) left mutants alive: the provider's norm for every way megatron-core
asks for one, and the models the spec builders construct computing megatron's fused "native" cross entropy with this
package's function, over the model's own tensor-parallel group, per token in megatron's ``[b, s]`` layout."""

from __future__ import annotations

import pytest
import torch

from megatron.oellm.backends.torch_native import TorchNativeSpecProvider
from megatron.oellm.backends.torch_native.norms import RMSNorm
from megatron.oellm.cards import get_card
from megatron.oellm.layers.cross_entropy import cross_entropy_reference
from megatron.oellm.models import language_model
from tests.unit_tests.cpu_megatron import cpu_model_building, cpu_torch_model, gloo_world


@pytest.mark.parametrize("for_qk", [False, True])
@pytest.mark.parametrize("has_residual", [False, True])
@pytest.mark.parametrize("rms_norm", [False, True])
def test_every_norm_slot_gets_this_packages_rmsnorm(rms_norm: bool, for_qk: bool, has_residual: bool) -> None:
    """megatron-core's own spec helpers ask a provider for norms without ``rms_norm=True`` (``layer_norm()``,
    ``layer_norm(has_residual=True)``, ``layer_norm(for_qk=True)``); the torch backend's norm is this package's
    RMSNorm whatever the flags, never megatron-core's local fallback (``WrappedTorchNorm``, which refuses sequence
    parallelism and zero-centred weights)."""
    provider = TorchNativeSpecProvider()
    assert provider.layer_norm(rms_norm=rms_norm, for_qk=for_qk, has_residual=has_residual) is RMSNorm


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_the_built_models_native_fused_loss_is_this_packages_over_the_models_tp_group(name, monkeypatch) -> None:
    """Both families' models, as the spec builders make them on the torch backend, with ``cross_entropy_loss_fusion``
    and ``cross_entropy_fusion_impl="native"``: the loss goes through this package's ``vocab_parallel_cross_entropy``
    (no fp32 copy of the logits; megatron-core's own would make one), reduced over the model's tensor-parallel group,
    and is the per-token cross entropy ``[b, s]`` of fresh random logits ``[s, b, V]``."""
    real = language_model.vocab_parallel_cross_entropy
    groups = []

    def recording(logits, target, group=None):
        groups.append(group)
        return real(logits, target, group)

    monkeypatch.setattr(language_model, "vocab_parallel_cross_entropy", recording)
    card = get_card(name)
    with gloo_world(), cpu_model_building():
        model = cpu_torch_model(card)
        model.config.cross_entropy_loss_fusion = True
        model.config.cross_entropy_fusion_impl = "native"
        seq, batch = torch.randint(3, 9, (2,)).tolist()
        logits = 3 * torch.randn(seq, batch, card.vocab_size)
        labels = torch.randint(0, card.vocab_size, (batch, seq))
        loss = model.compute_language_model_loss(labels, logits)
        assert len(groups) == 1 and groups[0] is model.pg_collection.tp
    assert loss.shape == (batch, seq)
    # an fp32 loss against the float64 reference: fp32's rounding over the vocabulary's sum (up to 4e-6 relative
    # seen), far below the error of a wrong formula or group
    torch.testing.assert_close(loss.double(), cross_entropy_reference(logits, labels.T).T, rtol=2e-5, atol=1e-5)
