"""The prebuilt-dataset-helpers patch: applies on 0.19.2 with helpers_cpp, leaves other releases alone, and keeps
upstream's function reachable behind it."""

import pytest

from megatron.oellm.patches import dataset_helpers
from megatron.oellm.patches.release import PATCHED_RELEASE
from tests.unit_tests.patches.upstream import unpatched


@pytest.fixture
def restore_compile_helpers():
    """megatron-core's datasets ``utils`` with upstream's ``compile_helpers``, even where the patch was applied
    earlier in this process; the function found before the test is restored afterwards."""
    from megatron.core.datasets import utils

    found = utils.compile_helpers
    utils.compile_helpers = unpatched(found)
    yield utils
    utils.compile_helpers = found


def test_applies_on_the_patched_release_and_skips_make(restore_compile_helpers, monkeypatch):
    utils = restore_compile_helpers
    assert dataset_helpers.prebuilt_helpers_available()  # the wheel ships helpers_cpp
    calls = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: calls.append(a))
    assert dataset_helpers.apply() == (dataset_helpers.megatron_core_release() == PATCHED_RELEASE)
    utils.compile_helpers()
    assert calls == []  # make was not run
    assert dataset_helpers.apply()  # idempotent


def test_other_release_keeps_upstream(restore_compile_helpers, monkeypatch):
    utils = restore_compile_helpers
    before = utils.compile_helpers
    assert not getattr(before, "oellm_patched", False)  # the fixture installed upstream's function
    monkeypatch.setattr(dataset_helpers, "megatron_core_release", lambda: "0.20.0")
    with pytest.warns(RuntimeWarning, match="0.20.0 is not 0.19.2"):
        assert not dataset_helpers.apply()
    assert utils.compile_helpers is before


def test_without_prebuilt_helpers_upstream_compiles_them(restore_compile_helpers, monkeypatch):
    """A megatron-core without ``helpers_cpp`` (a source checkout) needs upstream's ``make``: the patch stays out,
    on the patched release too."""
    utils = restore_compile_helpers
    before = utils.compile_helpers
    monkeypatch.setattr(dataset_helpers, "megatron_core_release", lambda: PATCHED_RELEASE)
    monkeypatch.setattr(dataset_helpers, "prebuilt_helpers_available", lambda: False)
    assert dataset_helpers.apply() is False
    assert utils.compile_helpers is before


def test_the_dataset_helpers_patch_keeps_upstreams_function_reachable(restore_compile_helpers):
    """The test fixtures install upstream's function through ``__wrapped__``; without it a patch applied earlier in
    the process (the training entry applies it) made the "other release keeps upstream" test compare the patch with
    itself."""
    datasets_utils = restore_compile_helpers
    upstream = datasets_utils.compile_helpers
    if not dataset_helpers.apply():
        pytest.skip("the patch does not apply here")
    assert datasets_utils.compile_helpers is not upstream
    assert unpatched(datasets_utils.compile_helpers) is upstream
    assert dataset_helpers.apply() and unpatched(datasets_utils.compile_helpers) is upstream  # wrapped once
