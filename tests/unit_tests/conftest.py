"""Fixtures shared by the unit tests: the one-process megatron-core runtime for GPU tests (see gpu_utils)."""

from gpu_utils import megatron_runtime, megatron_session, tf32_flags_restored

__all__ = ["megatron_runtime", "megatron_session", "tf32_flags_restored"]
