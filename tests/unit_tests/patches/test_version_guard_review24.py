"""A runtime patch that its version guard skips says so: on another megatron-core release the run would otherwise
lose the patch's fix (the TE-free optimizer's resume, the dataset helpers) without a word."""

import warnings

import pytest

from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step
from tests.unit_tests.patches.upstream import unpatched

distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")
OPTIMIZER_METHODS = ("state_dict", "load_state_dict", "_set_main_param_and_optimizer_states")
# each patch is also skipped, without a word, where the bug it fixes cannot occur
HELPERS = pytest.param(dataset_helpers, marks=pytest.mark.skipif(not dataset_helpers.prebuilt_helpers_available(),
                                                                 reason="no prebuilt helpers_cpp"))
OPTIMIZER = pytest.param(distrib_optimizer_step, marks=pytest.mark.skipif(distrib_optimizer.HAVE_APEX_OR_TE,
                                                                          reason="Apex/TE keep the step themselves"))


@pytest.fixture
def upstream_functions():
    """Upstream's patched functions installed for the test; what was there is restored afterwards."""
    from megatron.core.datasets import utils

    cls = distrib_optimizer.DistributedOptimizer
    found = {name: getattr(cls, name) for name in OPTIMIZER_METHODS}
    found_helpers = utils.compile_helpers
    for name, method in found.items():
        setattr(cls, name, unpatched(method))
    utils.compile_helpers = unpatched(found_helpers)
    yield
    for name, method in found.items():
        setattr(cls, name, method)
    utils.compile_helpers = found_helpers


@pytest.mark.parametrize("patch", [HELPERS, OPTIMIZER])
def test_a_patch_skipped_for_another_release_warns_naming_its_note_and_the_release(patch, upstream_functions,
                                                                                   monkeypatch):
    note = {dataset_helpers: "dataset-helpers-prebuilt", distrib_optimizer_step: "distrib-optimizer-step"}[patch]
    monkeypatch.setattr(patch, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning, match=rf"megatron-core 0\.20\.0 .*patches/{note}\.md"):
        assert not patch.apply()


@pytest.mark.parametrize("patch", [HELPERS, OPTIMIZER])
def test_a_patch_applied_on_its_release_does_not_warn(patch, upstream_functions, monkeypatch):
    monkeypatch.setattr(patch, "megatron_core_release", lambda: "0.19.2")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert patch.apply()
