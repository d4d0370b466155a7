"""Mutation audit 19 of the doctor's reading of an fla import error line: a missing module (``ModuleNotFoundError``,
with or without the module it names) is one megatron-core 0.19.2 catches, as the training entry counts it, like a
plain ``ImportError``; an ``AttributeError`` raised inside fla's import is not. Fresh random module names."""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm.doctor.rules import megatron_core_catches_line
from megatron.oellm.error_lines import one_line_error
from megatron.oellm.training.fla_kernels import megatron_core_catches


def _module() -> str:
    """A fresh random dotted module name."""
    return ".".join("".join(random.choices(string.ascii_lowercase, k=random.randint(3, 9)))
                    for _ in range(random.randint(1, 3)))


@pytest.mark.parametrize("kind", [ModuleNotFoundError, ImportError, AttributeError])
@pytest.mark.parametrize("named", [True, False])
def test_the_doctor_and_the_entry_agree_on_what_megatron_core_catches(kind: type[Exception], named: bool) -> None:
    module = _module()
    message = f"No module named '{module}'" if kind is not AttributeError else f"module {module!r} has no attribute 'x'"
    error = kind(message, name=module) if named and kind is not AttributeError else kind(message)
    line = one_line_error(error)
    assert megatron_core_catches_line(line) is megatron_core_catches(error) is (kind is not AttributeError)
