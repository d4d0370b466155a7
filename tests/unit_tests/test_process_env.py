"""The per-test environment guard of ``conftest.py`` (``mock.patch.dict(os.environ)``): what a test writes to ``os.environ`` directly does not reach the
next test (megatron-core's model constructors export Transformer Engine's attention switches there)."""

import os
import uuid
from unittest import mock

import pytest


def test_a_block_leaves_the_environment_as_it_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Variables set, changed and removed inside the block have their values from its start again, even after an
    exception; the names are fresh each run so no other setting can make the test pass."""
    added, changed, removed = (f"OELLM_TEST_{uuid.uuid4().hex.upper()}" for _ in range(3))
    monkeypatch.setenv(changed, "before")
    monkeypatch.setenv(removed, "kept")
    found = dict(os.environ)
    with pytest.raises(RuntimeError), mock.patch.dict(os.environ):
        os.environ[added] = "1"
        os.environ[changed] = "after"
        del os.environ[removed]
        raise RuntimeError("the test's failure")
    assert dict(os.environ) == found
    assert added not in os.environ and os.environ[changed] == "before" and os.environ[removed] == "kept"



@pytest.mark.parametrize("name", ["OELLM_EAGER_RMS_NORM", "OELLM_UPSTREAM_MOE_PERMUTATION", "OELLM_FP32_OPERAND_ROUTER"])
def test_a_slow_path_switch_is_on_only_when_set_to_1_in_the_environment_asked(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``OELLM_*=0`` (a job script turning a switch off explicitly) must keep the fast kernels, and ``oellm doctor``
    judges the environment it is given (a job's), not its own: the process's is set to the opposite each time."""
    from megatron.oellm import switches

    assert name in switches.SLOW_PATH_SWITCHES
    for value, on in (("1", True), ("0", False), ("", False), ("true", False), (None, False)):
        given = {} if value is None else {name: value}
        monkeypatch.setenv(name, "0" if on else "1")
        assert switches.is_on(name, given) is on
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
        assert switches.is_on(name) is on
