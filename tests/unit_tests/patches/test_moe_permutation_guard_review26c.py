"""The MoE permutation patch skipped for another megatron-core release says so, as the other runtime patches do: the
run otherwise loses the sorted permutation (its speed and determinism) with only ``MoE permutation upstream`` in
the start-up line and no reason."""

import random
import warnings

import pytest
from megatron.core.transformer.moe import moe_utils, token_dispatcher

from megatron.oellm.patches import moe_permutation


@pytest.fixture
def upstream_dispatcher(monkeypatch):
    """The dispatchers call upstream's functions during the test (a patch applied earlier in the process is undone
    by monkeypatch afterwards), and the opt-out is unset."""
    monkeypatch.setattr(token_dispatcher, "permute", moe_utils.permute)
    monkeypatch.setattr(token_dispatcher, "unpermute", moe_utils.unpermute)
    monkeypatch.delenv(moe_permutation.UPSTREAM_ENV, raising=False)


def another_release() -> str:
    """A random release that is not 0.19.2."""
    return f"0.{random.randint(20, 40)}.{random.randint(0, 9)}"


def test_another_release_keeps_upstream_and_warns_naming_the_release_and_the_note(upstream_dispatcher, monkeypatch):
    release = another_release()
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: release)
    with pytest.warns(RuntimeWarning, match=rf"megatron-core {release} is not 0\.19\.2.*"
                                            r"patches/moe-permutation-without-atomics\.md"):
        assert not moe_permutation.apply()
    assert token_dispatcher.permute is moe_utils.permute and token_dispatcher.unpermute is moe_utils.unpermute


def test_the_opt_out_and_the_patched_release_do_not_warn(upstream_dispatcher, monkeypatch):
    """``OELLM_UPSTREAM_MOE_PERMUTATION=1`` is the user's own choice (the doctor warns about it), and 0.19.2 applies."""
    release = another_release()
    monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: release)
    monkeypatch.setenv(moe_permutation.UPSTREAM_ENV, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert not moe_permutation.apply()
        monkeypatch.setattr(moe_permutation, "megatron_core_release", lambda: "0.19.2")
        assert not moe_permutation.apply()
        monkeypatch.delenv(moe_permutation.UPSTREAM_ENV)
        assert moe_permutation.apply() and moe_permutation.apply()
    assert token_dispatcher.permute.__wrapped__ is moe_utils.permute
