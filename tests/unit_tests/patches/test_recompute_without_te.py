"""The output-discarding recompute patch (``patches/recompute-without-transformer-engine.md``), on the CPU where
Transformer Engine does not import: upstream's checkpoint fails in its forward, the patched one computes.

The whole recompute (checkpoint, discard, backward) needs CUDA RNG states; ``tests/unit_tests/models/
test_recompute_gpu.py`` runs it in models on the GPU. Here the premise and the patch are shown on megatron's own
``CheckpointWithoutOutputFunction``, the step that fails.
"""

from __future__ import annotations

import pytest
import torch
from megatron.core.tensor_parallel import random as tp_random

from megatron.oellm.patches import recompute_without_te
from tests.unit_tests.patches.upstream import unpatched

pytestmark = pytest.mark.skipif(hasattr(tp_random, "FP8GlobalStateManager"),
                                reason="Transformer Engine imports here: the patch is not needed")


def _checkpointed_silu(checkpoint: tp_random.CheckpointWithoutOutput, inputs: torch.Tensor) -> torch.Tensor:
    """megatron's output-discarding checkpoint function run forward on ``silu`` of ``inputs``."""
    return tp_random.CheckpointWithoutOutputFunction.apply(torch.nn.functional.silu, checkpoint, inputs)


def test_upstream_checkpoint_without_te_fails_with_a_name_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise: upstream's constructor turns the default ``fp8=False`` into True, and the forward then needs
    Transformer Engine's FP8 state manager."""
    cls = tp_random.CheckpointWithoutOutput
    monkeypatch.setattr(cls, "__init__", unpatched(cls.__init__))
    checkpoint = cls()
    assert checkpoint.fp8 is True
    with pytest.raises(NameError, match="FP8GlobalStateManager"):
        _checkpointed_silu(checkpoint, torch.randn(5, 7))


def test_patched_checkpoint_computes_without_fp8() -> None:
    """With the patch the default checkpoint skips the FP8 path, returns upstream's result and keeps the input for
    the recompute; an explicit ``fp8`` request is dropped too, since there is no FP8 without TE."""
    assert recompute_without_te.needed()
    assert recompute_without_te.apply()
    inputs = torch.randn(5, 7, requires_grad=True)
    for checkpoint in (tp_random.CheckpointWithoutOutput(), tp_random.CheckpointWithoutOutput(fp8=True)):
        assert checkpoint.fp8 is False
        output = _checkpointed_silu(checkpoint, inputs)
        torch.testing.assert_close(output, torch.nn.functional.silu(inputs.detach()), rtol=0, atol=0)
        torch.testing.assert_close(checkpoint.ctx.saved_tensors[0], inputs, rtol=0, atol=0)


def test_apply_is_idempotent() -> None:
    """Applying twice keeps one patch layer over upstream's constructor."""
    cls = tp_random.CheckpointWithoutOutput
    recompute_without_te.apply()
    first = cls.__init__
    assert recompute_without_te.apply()
    assert cls.__init__ is first
    assert not getattr(cls.__init__.__wrapped__, "oellm_patched", False)


def test_apply_does_nothing_where_te_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """With Transformer Engine's FP8 state manager present the constructor stays upstream's, which FP8 runs need."""
    cls = tp_random.CheckpointWithoutOutput
    monkeypatch.setattr(cls, "__init__", unpatched(cls.__init__))
    monkeypatch.setattr(tp_random, "FP8GlobalStateManager", object(), raising=False)
    assert not recompute_without_te.needed()
    assert recompute_without_te.apply() is False
    assert not getattr(cls.__init__, "oellm_patched", False)


def test_other_release_keeps_upstream_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """On another megatron-core release the patch stays off and says so."""
    cls = tp_random.CheckpointWithoutOutput
    monkeypatch.setattr(cls, "__init__", unpatched(cls.__init__))
    monkeypatch.setattr(recompute_without_te, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning, match="recompute-without-transformer-engine"):
        assert recompute_without_te.apply() is False
    assert not getattr(cls.__init__, "oellm_patched", False)


def test_spec_builders_apply_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a spec provider (every spec builder does) installs the patch."""
    from megatron.oellm.models.building_blocks import spec_provider

    cls = tp_random.CheckpointWithoutOutput
    monkeypatch.setattr(cls, "__init__", unpatched(cls.__init__))
    spec_provider("torch")
    assert getattr(cls.__init__, "oellm_patched", False)
    assert cls().fp8 is False
