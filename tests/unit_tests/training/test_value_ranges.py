"""Optimizer, initialisation and loader values the training entry refuses before Megatron initialises, each checked
against the library that would refuse it later (torch's Adam, dropout, ``normal_`` and data loader, numpy's
seeding), the non-finite learning rate megatron would train on and the clipping norm it would ignore."""

from __future__ import annotations

import random
import re

import numpy
import pytest
import torch

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.value_ranges import check_value_ranges
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, entry_up_to_pretrain, refused_line


def _adam(betas=(0.9, 0.999), eps=1e-8):
    torch.optim.Adam([torch.nn.Parameter(torch.randn(2))], betas=betas, eps=eps)


LATE_REFUSALS = {
    "--adam-beta1": (random.choice([1.0, 1.5, -0.1]), lambda v: _adam(betas=(v, 0.999))),
    "--adam-beta2": (random.choice([1.5, -0.5]), lambda v: _adam(betas=(0.9, v))),
    "--adam-eps": (-random.uniform(1e-9, 1e-3), lambda v: _adam(eps=v)),
    "--hidden-dropout": (random.uniform(1.01, 5), lambda v: torch.nn.functional.dropout(torch.randn(4), p=v)),
    "--attention-dropout": (-random.uniform(0.01, 1), lambda v: torch.nn.functional.dropout(torch.randn(4), p=v)),
    "--init-method-std": (-random.uniform(0.001, 0.1), lambda v: torch.empty(4).normal_(0, v)),
    "--seed": (2**32 + random.randint(0, 1000), lambda v: numpy.random.seed(int(v))),
    "--num-workers": (-random.randint(1, 8), lambda v: torch.utils.data.DataLoader(range(4), num_workers=int(v))),
}


@pytest.mark.parametrize("flag", list(LATE_REFUSALS))
def test_a_value_the_library_refuses_later_is_refused_at_start(flag, monkeypatch, capsys):
    value, library = LATE_REFUSALS[flag]
    with pytest.raises((ValueError, RuntimeError)):
        library(value)  # what the run would stop on, after the model is built
    counts = flag in ("--seed", "--num-workers")
    text = str(int(value)) if counts else repr(value)
    shown = text if counts else f"{value:g}"
    kind = "an integer" if counts else "a finite number"
    given = f"{flag}={text}"  # one word: argparse takes a separate '-5e-05' for an option, not a negative number
    with pytest.raises(ValueError, match=rf"^{re.escape(flag)} {re.escape(shown)}: give {kind}"):
        check_value_ranges(parse_oellm_argv([given]))
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*TINY_MOE_RUN, given])
    assert f"error: {flag} {shown}: give {kind}" in line


@pytest.mark.parametrize("flag", ["--lr", "--min-lr", "--weight-decay", "--adam-beta2"])
@pytest.mark.parametrize("text", ["nan", "inf"])
def test_a_value_that_is_not_a_finite_number_is_refused(flag, text):
    """``--lr inf`` or ``--weight-decay nan`` passed megatron's checks and trained on NaNs."""
    with pytest.raises(ValueError, match=rf"^{flag} {float(text):g}: give a finite number"):
        check_value_ranges(parse_oellm_argv([flag, text]))


def test_the_seed_megatron_refuses_itself_is_refused_at_start():
    """megatron's ``_set_random_seed`` raises "Seed (0) should be a positive integer" after setting up the process
    groups; the entry says so first."""
    with pytest.raises(ValueError, match=r"^--seed 0: give an integer in \[1, 4294967295\]; megatron refuses"):
        check_value_ranges(parse_oellm_argv(["--seed", "0"]))


def test_values_in_range_pass_and_the_bounds_are_the_librarys():
    """Random values inside every range pass, and each range's edge values are ones the library accepts (a dropout
    of 1, a beta of 0, an epsilon of 0, a standard deviation of 0, no loader workers)."""
    inside = {"--adam-beta1": random.uniform(0, 0.999), "--adam-beta2": random.uniform(0, 0.9999),
              "--hidden-dropout": random.uniform(0, 1), "--attention-dropout": 1.0, "--adam-eps": 0.0,
              "--init-method-std": 0.0, "--clip-grad": 0.0, "--lr": random.uniform(1e-6, 1e-2)}
    argv = [token for flag, value in inside.items() for token in (flag, repr(value))]
    check_value_ranges(parse_oellm_argv([*argv, "--seed", str(random.randint(1, 2**32 - 1)), "--num-workers", "0"]))
    _adam(betas=(0.0, 0.0), eps=0.0)
    torch.nn.functional.dropout(torch.randn(4), p=1.0)
    torch.empty(4).normal_(0, 0.0)
    numpy.random.seed(2**32 - 1)


def test_a_clipping_norm_megatron_would_ignore_is_refused_and_inf_passes():
    """megatron-core 0.19.2 clips only when ``clip_grad > 0``: a negative or NaN norm turned clipping off without a
    word. 0 (off) and inf (the norm logged, nothing clipped) are settings and pass."""
    for text in ("nan", f"-{random.uniform(0.1, 10):.3f}"):
        with pytest.raises(ValueError, match=rf"^--clip-grad {re.escape(f'{float(text):g}')}: give a number >= 0; "
                                             "megatron-core clips only at a positive norm"):
            check_value_ranges(parse_oellm_argv([f"--clip-grad={text}"]))
    for text in ("0", "inf", repr(random.uniform(0.1, 10))):
        check_value_ranges(parse_oellm_argv([f"--clip-grad={text}"]))
