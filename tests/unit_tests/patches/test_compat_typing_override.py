"""The Python 3.11 provision for megatron-core 0.19.2 (``megatron.oellm.compat``, run by ``import megatron.oellm``):
``megatron.training`` imports ``typing.override``, which Python < 3.12 lacks; the provision installs typing_extensions'
in its place."""

import sys
import typing

from megatron.oellm import compat


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
