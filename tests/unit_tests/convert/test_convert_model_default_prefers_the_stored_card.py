"""mcore-to-hf's ``--model`` default takes hf-to-mcore's stored card (``oellm_card``) over the ``--oellm-model`` a
training run's stored arguments name, as :func:`megatron.oellm.convert.mcore_checkpoint.stored_card_name` says: the
record describes the weights field by field, the run's flag only names a card."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from megatron.oellm import cards
from megatron.oellm.cli import main
from megatron.oellm.convert import to_mcore


def test_the_stored_card_wins_over_the_runs_oellm_model(converted, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    other = random.choice([name for name in cards.list_card_names() if name != card.name])
    base = to_mcore.megatron_checkpoint_args
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args",
                        lambda c: argparse.Namespace(**{**vars(base(c)), "oellm_model": other}))
    to_mcore.hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "run")
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--mcore", str(Path(tmp / "run")), "--out", str(tmp / "out")]) == 0
    assert capsys.readouterr().out.startswith(f"oellm convert mcore-to-hf: {card.name} (the checkpoint's card): ")
