"""Python 3.11 provision for megatron-core 0.19.2.

megatron-core 0.19.2 declares Python >= 3.12, but the only 3.12 feature it needs is ``typing.override``
(imported by ``megatron.training``). On 3.11 we provide that one name from ``typing_extensions``, which is what
3.12's ``typing.override`` is a backport of. This must run before anything imports ``megatron.training``;
``import megatron.oellm`` does it.
"""

import sys
import typing


def provide_typing_override() -> bool:
    """Install ``typing.override`` on Python < 3.12; return True if it had to be provided.

    Idempotent, and a no-op on Python >= 3.12 where the name exists already.
    """
    if hasattr(typing, "override"):
        return False
    if sys.version_info >= (3, 12):  # pragma: no cover - 3.12 always has it
        return False
    import typing_extensions

    typing.override = typing_extensions.override  # type: ignore[attr-defined]
    return True
