"""Fixtures shared by the unit tests: the one-process megatron-core runtime for GPU tests (see gpu_utils), and the
process environment as each test found it."""

import os
from collections.abc import Iterator
from unittest import mock

import pytest

from tests.unit_tests.gpu_utils import megatron_runtime, megatron_session, tf32_flags_restored

__all__ = ["megatron_runtime", "megatron_session", "process_environment_restored", "tf32_flags_restored"]


@pytest.fixture(autouse=True)
def process_environment_restored() -> Iterator[None]:
    """Per-test fixture: ``os.environ`` is put back as the test found it. Code under test writes to it directly, not
    through ``monkeypatch``: megatron-core's ``LanguageModule`` exports ``NVTE_FLASH_ATTN``, ``NVTE_FUSED_ATTN`` and
    ``NVTE_UNFUSED_ATTN`` for the attention backend of every model it builds, and a later test's start-up check (the
    recipe's ``--local`` refusal, megatron-core's own assertion on those switches) would read them as a job's."""
    with mock.patch.dict(os.environ):  # on leaving, every variable has its value from the start again
        yield
