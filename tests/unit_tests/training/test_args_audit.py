"""Mutation audit of :mod:`megatron.oellm.training.args`: refusals the existing tests let change unnoticed (a flag
refusing a value as the first argument)."""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm.training.args import argv_refusal


def _word() -> str:
    """A fresh word no enum-typed flag takes."""
    return "".join(random.choices(string.ascii_lowercase, k=random.randint(5, 10))) + "x"


@pytest.mark.parametrize("flag", ["--attention-backend", "--exit-signal"])
def test_a_flag_refusing_its_value_as_the_first_argument_is_named(flag: str) -> None:
    """megatron converts these flags' values outside argparse (a ``KeyError``); the refusal line must name the flag
    also when it is the command line's first word (``torchrun ... entry.py --attention-backend flashy``), where the
    search for the refusing flag starts."""
    word = _word()
    assert argv_refusal([flag, word]) == f"invalid value {word!r} for {flag}"
    others = ["--train-iters", str(random.randint(2, 99))]
    assert argv_refusal([flag, word, *others]) == f"invalid value {word!r} for {flag}"
