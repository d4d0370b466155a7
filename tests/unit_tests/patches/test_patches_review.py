"""Cross-cutting checks of the runtime patches: upstream stays reachable behind each patch, the version guard reads
the release the way the patches need it, the wrappers keep upstream's signatures, and the Python 3.11 provision."""

import inspect
import sys
import typing

import pytest
from megatron.core import package_info
from megatron.core.transformer.moe import moe_utils

from megatron.oellm import compat
from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step, moe_permutation
from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release
from tests.unit_tests.patches.upstream import unpatched


@pytest.fixture
def datasets_utils():
    """megatron-core's datasets ``utils`` with upstream's ``compile_helpers``; what was there is restored after."""
    from megatron.core.datasets import utils

    found = utils.compile_helpers
    utils.compile_helpers = unpatched(found)
    yield utils
    utils.compile_helpers = found


def test_the_dataset_helpers_patch_keeps_upstreams_function_reachable(datasets_utils):
    """The test fixtures install upstream's function through ``__wrapped__``; without it a patch applied earlier in
    the process (the training entry applies it) made the "other release keeps upstream" test compare the patch with
    itself."""
    upstream = datasets_utils.compile_helpers
    if not dataset_helpers.apply():
        pytest.skip("the patch does not apply here")
    assert datasets_utils.compile_helpers is not upstream
    assert unpatched(datasets_utils.compile_helpers) is upstream
    assert dataset_helpers.apply() and unpatched(datasets_utils.compile_helpers) is upstream  # wrapped once


def test_the_optimizer_patch_keeps_upstreams_methods_reachable():
    distrib_optimizer = pytest.importorskip("megatron.core.optimizer.distrib_optimizer")
    cls = distrib_optimizer.DistributedOptimizer
    names = ("state_dict", "load_state_dict", "_set_main_param_and_optimizer_states")
    found = {name: getattr(cls, name) for name in names}
    upstream = {name: unpatched(method) for name, method in found.items()}
    try:
        for name, method in upstream.items():
            setattr(cls, name, method)
        if not distrib_optimizer_step.apply():
            pytest.skip("the patch does not apply here")
        assert distrib_optimizer_step.apply()  # idempotent
        for name, method in upstream.items():
            assert getattr(cls, name).oellm_patched and unpatched(getattr(cls, name)) is method
            assert getattr(cls, name).__wrapped__ is method  # one layer
            ours = inspect.signature(getattr(cls, name), follow_wrapped=False)
            assert list(ours.parameters) == list(inspect.signature(method).parameters)
    finally:
        for name, method in found.items():
            setattr(cls, name, method)


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


def test_a_pre_release_build_keeps_every_upstream_function(datasets_utils, monkeypatch):
    """The guard each patch runs reads megatron-core's ``__version__``: a 0.19.2 pre-release keeps upstream."""
    from megatron.core.transformer.moe import token_dispatcher

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


@pytest.mark.parametrize("name", ["permute", "unpermute"])
def test_the_permutation_wrappers_take_upstreams_arguments(name):
    """The dispatchers pass keyword arguments by upstream's names: the wrappers' parameters must be the same (names,
    order, kinds and defaults)."""
    original = getattr(moe_utils, name)
    wrap = {"permute": moe_permutation._permute_without_atomics,
            "unpermute": moe_permutation._unpermute_without_atomics}[name]
    ours = inspect.signature(wrap(original), follow_wrapped=False).parameters
    theirs = inspect.signature(original).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.values()]


def test_the_python_311_provision_installs_typing_extensions_override(monkeypatch):
    """On Python < 3.12 ``typing.override`` (which ``megatron.training`` imports) comes from typing_extensions;
    the provision is idempotent and a no-op where the name exists."""
    import typing_extensions

    if sys.version_info >= (3, 12):  # pragma: no cover - 3.12 has the name
        assert compat.provide_typing_override() is False
        return
    monkeypatch.delattr(typing, "override", raising=False)
    assert compat.provide_typing_override() is True
    assert typing.override is typing_extensions.override
    assert compat.provide_typing_override() is False  # idempotent
