"""The version guard of the runtime patches: each applies on megatron-core 0.19.2 only, compared without the local
part of the version (a pre-release of 0.19.2 is not the code the patches were written for). A patch the guard skips
says so, naming the release and its note: on another release the run would otherwise lose the patch's fix (the
TE-free optimizer's resume, the dataset helpers) without a word. The optimizer patch checks the release before
reading that release's ``HAVE_APEX_OR_TE``. (The MoE permutation patch's guard: ``test_moe_permutation.py``.)"""

import random
import warnings

import pytest
from megatron.core import package_info
from megatron.core.transformer.moe import moe_utils, token_dispatcher

from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step, moe_permutation
from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release
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
    """Upstream's patched functions installed for the test (megatron-core's datasets ``utils`` yielded); what was
    there is restored afterwards."""
    from megatron.core.datasets import utils

    cls = distrib_optimizer.DistributedOptimizer
    found = {name: getattr(cls, name) for name in OPTIMIZER_METHODS}
    found_helpers = utils.compile_helpers
    for name, method in found.items():
        setattr(cls, name, unpatched(method))
    utils.compile_helpers = unpatched(found_helpers)
    yield utils
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


@pytest.mark.parametrize(("version", "release", "patched"), [
    ("0.19.2", "0.19.2", True),
    ("0.19.2+f6a5b40", "0.19.2", True),  # the commit of whatever git repository encloses site-packages
    ("0.19.2rc0+3c4f4ab", "0.19.2rc0", False),  # a pre-release of 0.19.2 is not the code the patches were written for
    ("0.19.2.dev0", "0.19.2.dev0", False),
    ("0.19.20", "0.19.20", False),
    ("0.20.0rc0+abcdef0", "0.20.0rc0", False),  # a Megatron-LM source checkout of a later release
])
def test_the_guard_compares_the_release_without_its_local_part_only(version, release, patched, monkeypatch):
    monkeypatch.setattr(package_info, "__version__", version)
    assert megatron_core_release() == release
    assert (megatron_core_release() == PATCHED_RELEASE) is patched


def test_a_pre_release_build_keeps_every_upstream_function(upstream_functions, monkeypatch):
    """The guard each patch runs reads megatron-core's ``__version__``: a 0.19.2 pre-release keeps upstream."""
    datasets_utils = upstream_functions
    monkeypatch.setattr(package_info, "__version__", "0.19.2rc0+3c4f4ab")
    monkeypatch.setattr(token_dispatcher, "permute", moe_utils.permute)
    monkeypatch.setattr(token_dispatcher, "unpermute", moe_utils.unpermute)
    monkeypatch.delenv(moe_permutation.UPSTREAM_ENV, raising=False)
    upstream = datasets_utils.compile_helpers
    with pytest.warns(RuntimeWarning, match="0.19.2rc0 is not 0.19.2"):
        assert not dataset_helpers.apply() and datasets_utils.compile_helpers is upstream
    with pytest.warns(RuntimeWarning, match="0.19.2rc0 is not 0.19.2"):
        assert not distrib_optimizer_step.apply()
    assert not moe_permutation.apply() and token_dispatcher.permute is moe_utils.permute
