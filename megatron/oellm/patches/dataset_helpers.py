"""Use megatron-core's prebuilt dataset helpers instead of ``make`` (see ``patches/dataset-helpers-prebuilt.md``).

``megatron.training``'s initialisation always runs ``megatron.core.datasets.utils.compile_helpers``, which calls
``make`` in the installed ``megatron/core/datasets`` folder. The megatron-core 0.19.2 wheel ships the compiled
extension (``helpers_cpp``) but no Makefile there, so every pretrain run from the wheel exits with "Failed to compile
the C++ dataset helper functions". The patch skips the build when the prebuilt extension imports.
"""

from __future__ import annotations

import functools
import importlib

from megatron.oellm.patches.release import applies_to, megatron_core_release


def prebuilt_helpers_available() -> bool:
    """Whether megatron-core's compiled dataset helpers (``helpers_cpp``) import."""
    try:
        importlib.import_module("megatron.core.datasets.helpers_cpp")
    except ImportError:
        return False
    return True


def apply() -> bool:
    """Make ``compile_helpers`` a no-op when the prebuilt helpers import; True if the patch was applied.

    Only on :data:`PATCHED_RELEASE`; any other release keeps upstream's behaviour, with a warning. Idempotent.
    """
    from megatron.core.datasets import utils

    if not prebuilt_helpers_available():
        return False
    if not applies_to(megatron_core_release(), "dataset-helpers-prebuilt"):
        return False
    original = utils.compile_helpers
    if getattr(original, "oellm_patched", False):
        return True

    def compile_helpers() -> None:
        """Prebuilt ``helpers_cpp`` found: nothing to compile (megatron.oellm patch)."""

    # upstream's function stays reachable as ``__wrapped__`` (tests compare against it even after an apply)
    functools.update_wrapper(compile_helpers, original, assigned=("__module__", "__name__", "__qualname__"))
    compile_helpers.oellm_patched = True
    utils.compile_helpers = compile_helpers
    return True
