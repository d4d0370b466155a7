"""Edges of the training entry's value ranges (audit 11): an infinite value of the flags whose sign megatron checks
itself, the learning-rate warm-up start, the exact message of an unbounded range, and the bounds torch draws
(Adam's beta of 1 refused, a dropout of 1 accepted)."""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.value_ranges import check_value_ranges


@pytest.mark.parametrize("flag", ["--lr", "--min-lr", "--lr-warmup-init", "--weight-decay"])
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_an_unbounded_flag_takes_only_finite_numbers_and_says_exactly_that(flag, text):
    """These flags have no bound of their own here (megatron checks their signs), so the refusal asks for a finite
    number and nothing more: ``--lr=-inf`` or ``--weight-decay=-inf`` trained on NaNs like ``nan`` did."""
    with pytest.raises(ValueError) as refusal:
        check_value_ranges(parse_oellm_argv([f"{flag}={text}"]))
    assert str(refusal.value) == f"{flag} {float(text):g}: give a finite number; megatron-core trains on NaNs"


def test_finite_values_of_the_unbounded_flags_pass_whatever_their_sign():
    """Any finite value, negative ones too, is left to megatron's own checks."""
    check_value_ranges(parse_oellm_argv([f"--lr={random.uniform(1e-6, 1e-2)}",
                                         f"--lr-warmup-init={random.uniform(0, 1e-4)}",
                                         f"--weight-decay={-random.uniform(0.01, 1)}"]))


def test_an_adam_beta1_of_exactly_one_is_refused_as_torch_does():
    with pytest.raises(ValueError, match=r"Invalid beta parameter"):
        torch.optim.Adam([torch.nn.Parameter(torch.randn(2))], betas=(1.0, 0.999))
    with pytest.raises(ValueError, match=r"^--adam-beta1 1: give a finite number in \[0, 1\); torch's Adam refuses"):
        check_value_ranges(parse_oellm_argv(["--adam-beta1", "1.0"]))


def test_a_hidden_dropout_of_exactly_one_passes_as_torch_takes_it():
    """A dropout of 1 is a (useless but valid) probability torch accepts: it is no reason to refuse a run."""
    assert torch.count_nonzero(torch.nn.functional.dropout(torch.randn(8) + 10, p=1.0)) == 0
    check_value_ranges(parse_oellm_argv(["--hidden-dropout", "1.0", "--attention-dropout",
                                         repr(random.uniform(0, 1))]))
