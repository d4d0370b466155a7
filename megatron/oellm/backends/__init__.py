"""Compute backends for megatron-oellm models: Transformer Engine (default when importable) or torch-native.

:func:`backend_spec_provider` hands the spec builders a megatron-core BackendSpecProvider for either; both
produce the same checkpoint layout. :func:`check_backend_support` rejects combinations a backend cannot run
before any GPU memory is touched.
"""

from megatron.oellm.backends.selection import (
    BACKEND_CHOICES,
    backend_spec_provider,
    check_backend_support,
    check_config_support,
    resolve_backend,
)

__all__ = [
    "BACKEND_CHOICES",
    "backend_spec_provider",
    "check_backend_support",
    "check_config_support",
    "resolve_backend",
]
