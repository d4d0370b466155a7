"""The optimizer patch checks the megatron-core release before reading that release's ``HAVE_APEX_OR_TE``."""

import random

import pytest

from megatron.oellm.patches import distrib_optimizer_step

distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")


def test_another_release_without_the_te_flag_warns_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release without the module global raised AttributeError at import of the training entry; it must get the
    patch's usual RuntimeWarning and keep upstream's methods."""
    release = f"0.{random.randint(20, 99)}.{random.randint(0, 9)}"
    cls = distrib_optimizer.DistributedOptimizer
    methods = {name: getattr(cls, name) for name in ("state_dict", "load_state_dict")}
    monkeypatch.delattr(distrib_optimizer, "HAVE_APEX_OR_TE")
    monkeypatch.setattr(distrib_optimizer_step, "megatron_core_release", lambda: release)
    with pytest.warns(RuntimeWarning, match=rf"megatron-core {release} is not 0\.19\.2"):
        assert distrib_optimizer_step.apply() is False
    assert {name: getattr(cls, name) for name in methods} == methods
