"""Upstream's functions behind this package's runtime patches, for tests that compare against them.

A patch applied earlier in the same pytest process (the training entry applies them, and they are never undone)
replaces the module or class attribute, so reading the attribute in a fixture would give the patched function and an
"upstream" test would compare the patch with itself. Every patch keeps its original as ``__wrapped__``.
"""

from collections.abc import Callable
from typing import Any


def unpatched(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with every megatron.oellm patch layer (``oellm_patched``) peeled off via ``__wrapped__``."""
    while getattr(function, "oellm_patched", False):
        function = function.__wrapped__
    return function
