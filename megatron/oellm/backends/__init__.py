"""Compute backends for megatron-oellm models: Transformer Engine (default when importable) or torch-native.

:func:`backend_spec_provider` hands the spec builders a megatron-core BackendSpecProvider for either; both
write the same distributed-checkpoint keys and tensors, so a checkpoint of one loads in the other (one the torch-native
backend saved before its norms carried Transformer Engine's extra state needs a strictness that drops missing keys:
``training.load_checks.check_norm_extra_state``). :func:`check_backend_support` rejects combinations a backend cannot
run
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
