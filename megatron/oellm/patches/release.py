"""The installed megatron-core release, which every runtime patch checks before it applies."""

from __future__ import annotations

import warnings

PATCHED_RELEASE = "0.19.2"
"""The megatron-core release the runtime patches of this package were written for."""


def megatron_core_release() -> str:
    """Installed megatron-core version without its local part (``0.19.2+f6a5b40`` -> ``0.19.2``): megatron-core
    0.19.2's ``package_info`` appends the commit of whatever git repository encloses its installed folder (see
    ``patches/megatron-core-version-commit.md``)."""
    from megatron.core import package_info

    return package_info.__version__.split("+")[0]


def warn_not_applied(release: str, note: str) -> None:
    """Say (``RuntimeWarning``) that the patch described in ``patches/<note>.md`` is skipped on ``release``, another
    release than :data:`PATCHED_RELEASE`: upstream's code runs, with or without the bug the patch fixes."""
    warnings.warn(f"megatron-core {release} is not {PATCHED_RELEASE}: the runtime patch of patches/{note}.md is not "
                  "applied, upstream's code runs unchanged", RuntimeWarning, stacklevel=3)
