"""The training entry run with megatron's argument validation made to fail the test if it is reached: a refusal
these tests expect must come before it (megatron-core 0.19.2 asserts, expands layouts and builds the tokenizer there)."""

from __future__ import annotations

import pytest

from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain


class ValidationReached(Exception):
    """Raised by megatron's validation in :func:`entry_refusing_before_validation`: no type the entry turns into an
    ``error:`` line (megatron's own refusals are ``AssertionError``, ``TypeError`` and ``RuntimeError``)."""


def entry_refusing_before_validation(monkeypatch: pytest.MonkeyPatch):
    """:func:`~tests.unit_tests.training.entry_helpers.entry_up_to_pretrain` whose megatron validation raises
    :class:`ValidationReached`, which the entry does not turn into an ``error:`` line."""
    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)

    def reached(**_kwargs):
        raise ValidationReached("megatron's validation was reached")

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", reached)
    return entry
