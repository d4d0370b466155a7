"""The installed megatron-core release, which every runtime patch checks before it applies."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

PATCHED_RELEASE = "0.19.2"
"""The megatron-core release the runtime patches of this package were written for."""


def megatron_core_release() -> str:
    """Installed megatron-core version without its local part (``0.19.2+f6a5b40`` -> ``0.19.2``): megatron-core
    0.19.2's ``package_info`` appends the commit of whatever git repository encloses its installed folder (see
    ``patches/megatron-core-version-commit.md``)."""
    from megatron.core import package_info

    return package_info.__version__.split("+")[0]


def warn_not_applied(release: str, note: str, stacklevel: int = 3) -> None:
    """Say (``RuntimeWarning``) that the change described in ``patches/<note>.md`` is skipped on ``release``, another
    release than :data:`PATCHED_RELEASE`: upstream's code runs, with or without the bug the change fixes. The change
    is a runtime patch or, for the MoE metrics tracker subclass (:mod:`megatron.oellm.training.moe_metrics`), no patch
    at all, so the message names neither. ``stacklevel`` as ``warnings.warn`` takes it (the default names the caller
    of the patch's ``apply``)."""
    warnings.warn(f"megatron-core {release} is not {PATCHED_RELEASE}: the change of patches/{note}.md is not made, "
                  "upstream's code runs unchanged", RuntimeWarning, stacklevel=stacklevel)


def applies_to(release: str, note: str) -> bool:
    """Whether the change of ``patches/<note>.md`` (a runtime patch or an override) applies to megatron-core
    ``release``: only on :data:`PATCHED_RELEASE`; on another it warns (:func:`warn_not_applied`) and upstream's code
    stays. Each caller passes its own module's ``megatron_core_release()``, which its tests stand in for another
    release."""
    if release == PATCHED_RELEASE:
        return True
    warn_not_applied(release, note, stacklevel=4)
    return False


def without_patch_layers(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with this package's patch layers (``oellm_patched`` wrappers, which keep upstream's function as
    ``__wrapped__``) peeled off, so that re-applying a patch replaces its wrapper instead of stacking another."""
    while getattr(function, "oellm_patched", False):
        function = function.__wrapped__
    return function
