"""Runtime patch behaviour the per-patch tests left open (mutation audit): the skip warning points at the code that
applied the patch, the dataset-helpers probe falls back to upstream's ``make`` for a missing or broken extension and
wraps once, the optimizer template never replaces a partial state, and the run log names a permutation that is
applied. (The MoE metrics tracker's counterparts: ``tests/unit_tests/training/test_moe_metrics_*.py``.)"""

from __future__ import annotations

import importlib
import random
import sys
from types import SimpleNamespace

import pytest
import torch
from megatron.core.transformer.moe import moe_utils, token_dispatcher

from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step, moe_permutation
from megatron.oellm.patches.release import PATCHED_RELEASE
from tests.unit_tests.patches.upstream import unpatched

HELPERS_CPP = "megatron.core.datasets.helpers_cpp"


def another_release() -> str:
    """A random megatron-core release that is not 0.19.2."""
    return f"0.{random.randint(20, 60)}.{random.randint(0, 9)}"


@pytest.fixture
def upstream_compile_helpers(monkeypatch):
    """megatron-core's datasets ``utils`` with upstream's ``compile_helpers`` for the test (restored afterwards)."""
    from megatron.core.datasets import utils

    monkeypatch.setattr(utils, "compile_helpers", unpatched(utils.compile_helpers))
    return utils


@pytest.fixture
def upstream_dispatcher(monkeypatch):
    """The dispatchers call upstream's permutation during the test; the opt-out is unset."""
    monkeypatch.setattr(token_dispatcher, "permute", moe_utils.permute)
    monkeypatch.setattr(token_dispatcher, "unpermute", moe_utils.unpermute)
    monkeypatch.delenv(moe_permutation.UPSTREAM_ENV, raising=False)


def test_the_skip_warning_points_at_the_code_that_applied_the_patch(upstream_dispatcher, monkeypatch):
    """A skipped patch's RuntimeWarning is attributed to the caller of ``apply`` (the training entry, a spec
    builder), not to the patch package's own ``release`` module, so a user sees which start-up step lost the fix.
    Both warning paths: :func:`~megatron.oellm.patches.release.applies_to` and the permutation's own."""
    release = another_release()
    monkeypatch.setattr(distrib_optimizer_step, "megatron_core_release", lambda: release)
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: release)
    for apply in (distrib_optimizer_step.apply, moe_permutation.apply):
        with pytest.warns(RuntimeWarning, match=rf"megatron-core {release} is not") as record:
            assert apply() is False
        assert [warning.filename for warning in record] == [__file__]


def test_a_source_checkout_without_the_compiled_helpers_keeps_upstreams_make(upstream_compile_helpers, monkeypatch):
    """Without ``helpers_cpp`` (a source checkout has ``helpers.cpp`` only) the datasets need upstream's ``make``:
    the probe says so and the patch stays out, on the patched release too."""
    upstream = upstream_compile_helpers.compile_helpers
    monkeypatch.setitem(sys.modules, HELPERS_CPP, None)  # the import of helpers_cpp fails
    monkeypatch.setattr(dataset_helpers, "megatron_core_release", lambda: PATCHED_RELEASE)
    assert dataset_helpers.prebuilt_helpers_available() is False
    assert dataset_helpers.apply() is False
    assert upstream_compile_helpers.compile_helpers is upstream


def test_a_broken_compiled_helpers_build_keeps_upstreams_make(upstream_compile_helpers, monkeypatch):
    """A ``helpers_cpp`` that is present but does not load (built for another Python or torch: ``ImportError:
    undefined symbol``) makes the probe say 'not available' and upstream rebuild it, instead of the ImportError
    stopping the run's start-up."""
    upstream = upstream_compile_helpers.compile_helpers
    real_import = importlib.import_module
    symbol = f"_ZN{random.randint(10, 99)}helpers"

    def import_module(name, *args, **kwargs):
        if name == HELPERS_CPP:
            raise ImportError(f"{HELPERS_CPP}: undefined symbol: {symbol}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.setattr(dataset_helpers, "megatron_core_release", lambda: PATCHED_RELEASE)
    assert dataset_helpers.prebuilt_helpers_available() is False
    assert dataset_helpers.apply() is False
    assert upstream_compile_helpers.compile_helpers is upstream


def test_applying_the_dataset_helpers_patch_again_keeps_one_layer(upstream_compile_helpers, monkeypatch):
    """``apply`` runs at every training entry start (several runs in one process): it wraps upstream's function once,
    and the no-op it installs never runs ``make``."""
    upstream = upstream_compile_helpers.compile_helpers
    monkeypatch.setattr(dataset_helpers, "megatron_core_release", lambda: PATCHED_RELEASE)
    if not dataset_helpers.prebuilt_helpers_available():
        pytest.skip("no prebuilt helpers_cpp here")
    for _ in range(random.randint(2, 4)):
        assert dataset_helpers.apply() is True
    assert upstream_compile_helpers.compile_helpers.__wrapped__ is upstream
    calls = []
    monkeypatch.setattr("subprocess.run", lambda *args, **kwargs: calls.append(args))
    upstream_compile_helpers.compile_helpers()
    assert calls == []


distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")
NEEDS_TE_FREE_OPTIMIZER = pytest.mark.skipif(distrib_optimizer.HAVE_APEX_OR_TE,
                                             reason="the optimizer patch targets megatron-core without Apex/TE")


@NEEDS_TE_FREE_OPTIMIZER
def test_a_partially_stepped_optimizer_keeps_its_state_through_the_state_dict(monkeypatch):
    """A parameter without a gradient (frozen, or unused in the steps so far) has no Adam state while the others
    have: the optimizer has state, so the template must not replace it (also where an empty state was read beside
    the real one). Replacing and popping it discarded the stepped parameters' moments and saved step 0."""
    cls = distrib_optimizer.DistributedOptimizer
    for name in ("state_dict", "load_state_dict", "_set_main_param_and_optimizer_states"):
        monkeypatch.setattr(cls, name, unpatched(getattr(cls, name)))
    monkeypatch.setattr(distrib_optimizer_step, "megatron_core_release", lambda: PATCHED_RELEASE)
    assert distrib_optimizer_step.apply()
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    adam = torch.optim.Adam(params, lr=1e-3)
    steps = random.randint(1, 4)
    for _ in range(steps):
        params[0].grad = torch.randn_like(params[0])  # params[1] never gets a gradient
        adam.step()
    moments = {key: value.clone() for key, value in adam.state[params[0]].items()}
    shell = object.__new__(cls)
    shell.optimizer, shell.grad_scaler = adam, None
    shell.ddp_config = SimpleNamespace(use_megatron_fsdp=False)
    shell.config = SimpleNamespace(fp16=False, use_precision_aware_optimizer_no_fp8_or_ds_fp8=False)

    def assert_moments_kept():
        assert set(adam.state[params[0]]) == set(moments)
        for key, value in moments.items():
            torch.testing.assert_close(adam.state[params[0]][key], value, rtol=0, atol=0)

    state = cls.state_dict(shell)
    assert [group["step"] for group in state["optimizer"]["param_groups"]] == [float(steps)]
    assert_moments_kept()
    adam.state[params[1]]  # a defaultdict read adds an empty state beside the real one: upstream's KeyError stays
    with pytest.raises(KeyError, match="step"):
        cls.state_dict(shell)
    assert_moments_kept()


def test_the_run_log_names_the_sorted_permutation_while_it_is_applied(upstream_dispatcher, monkeypatch):
    """The opt-out set after the patch was applied in this process (a second run in one process) leaves the
    dispatchers on the sorted permutation: the start-up line must say so, not 'upstream'."""
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: PATCHED_RELEASE)
    assert moe_permutation.apply()
    monkeypatch.setenv(moe_permutation.UPSTREAM_ENV, "1")
    assert not moe_permutation.enabled()
    assert moe_permutation.describe(random.randint(2, 256), False, "alltoall") == "sorted"
