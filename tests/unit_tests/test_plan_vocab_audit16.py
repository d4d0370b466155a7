"""The sixteenth mutation audit's tests of ``oellm plan``'s padded vocabulary: the refusal names the multiple as
divisor x TP and the nearest padded size at that multiple (a size of 0 or below is padded from 1), a TP below 1 is the
layout check's to refuse, ``--make-vocab-size-divisible-by`` takes positive sizes only, and the card's vocabulary is
padded to a divisor of the run's own at TP 1 too."""

from __future__ import annotations

import json
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.plan import check_padded_vocab

PLAN = ["plan", "qwen3-30b-a3b", "--nodes", "1"]


def refusal(capsys: pytest.CaptureFixture[str], *options: str) -> str:
    """The one error line of ``oellm plan qwen3-30b-a3b --nodes 1 OPTIONS``, which must be refused (status 2)."""
    assert main([*PLAN, *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_the_refusal_names_the_multiple_of_divisor_and_tp_and_the_size_at_or_above(capsys) -> None:
    """At TP 2 the multiple is 256, not the divisor's 128; a size 2 above a multiple of 256 pads to the next one (a
    multiple of 128 would be 126 above it)."""
    padded_below = 256 * random.randrange(300, 1000)
    err = refusal(capsys, "--tp", "2", "--sp", "--padded-vocab", str(padded_below + 2))
    assert "(128) x TP (2) = 256, so" in err and f"is {padded_below + 256})" in err


def test_the_nearest_size_is_at_the_runs_own_divisor(capsys) -> None:
    divisor = random.choice([8, 16, 24, 40])
    below = divisor * random.randrange(1000, 5000)
    err = refusal(capsys, "--make-vocab-size-divisible-by", str(divisor), "--padded-vocab", str(below + 1))
    assert f"= {divisor}, so" in err and f"is {below + divisor})" in err


@pytest.mark.parametrize("size", [0, -1, -128])
def test_a_size_of_zero_or_below_names_the_first_multiple(size: int, capsys) -> None:
    err = refusal(capsys, "--padded-vocab", str(size))
    assert f"--padded-vocab {size}: " in err and f"the multiple at or above {size} is 128)" in err


def test_a_tp_below_one_is_left_to_the_layout_check(capsys) -> None:
    """``check_padded_vocab`` leaves a TP of 0 to the layout's own check, which names it; dividing by 0 x divisor
    raised a ZeroDivisionError."""
    check_padded_vocab(128 * random.randrange(1, 2000) + 1, 0, 128)
    assert refusal(capsys, "--tp", "0", "--padded-vocab", "384") == "oellm plan: error: tp must be >= 1, got 0\n"


@pytest.mark.parametrize("divisor", ["0", "-128"])
def test_a_divisor_below_one_is_a_usage_error(divisor: str, capsys) -> None:
    with pytest.raises(SystemExit) as usage:
        main([*PLAN, "--make-vocab-size-divisible-by", divisor])
    assert usage.value.code == 2
    assert f"argument --make-vocab-size-divisible-by: expected a positive integer, got '{divisor}'" in \
        capsys.readouterr().err


def test_the_cards_vocabulary_is_padded_to_the_runs_divisor_at_tp_one(capsys) -> None:
    """Qwen3's 151,936 is a multiple of 128, so only another divisor shows the padding at TP 1: 1000 pads it to
    152,000, whose logits the plan counts."""
    assert main([*PLAN, "--make-vocab-size-divisible-by", "1000", "--seq-length", "4096", "--json"]) == 0
    logits = json.loads(capsys.readouterr().out)["flops"]["breakdown"]["logits"]
    assert logits == pytest.approx(6 * get_card("qwen3-30b-a3b").hidden_size * 152_000 / 1e9, rel=1e-12)
