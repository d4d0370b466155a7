"""mcore-to-hf without ``--model`` converts with the card the checkpoint stores (hf-to-mcore's record, a training
run's ``--oellm-model``); it required ``--model`` even then. Without one stored, the refusal names ``--model``."""

from __future__ import annotations

import argparse
import random
import shutil

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.dist_ckpt import save_streaming


def test_the_stored_card_is_the_default(converted, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--mcore", str(tmp / "mcore"), "--out", str(tmp / "out")]) == 0
    assert capsys.readouterr().out.startswith(f"oellm convert mcore-to-hf: {card.name} (the checkpoint's card): read ")
    assert any((tmp / "out").glob("*.safetensors"))


def test_a_given_model_still_wins_and_is_checked(converted, capsys: pytest.CaptureFixture) -> None:
    """``--model`` of another card keeps today's refusal (the stored card named)."""
    card, _, tmp = converted
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", "qwen3.5-35b-a3b-tiny", "--mcore", str(tmp / "mcore"),
                 "--out", str(tmp / "out")]) == 2
    assert f"checkpoint was written for card {card.name!r}" in capsys.readouterr().err


def test_a_training_run_names_its_card(converted, capsys: pytest.CaptureFixture) -> None:
    """A checkpoint whose common state holds only a training run's arguments (``oellm_model``)."""
    card, _, tmp = converted
    directory = tmp / "run" / f"iter_{random.randrange(1, 10**6):07d}"
    save_streaming(directory, [], {}, dict, {"args": argparse.Namespace(oellm_model=card.name)})
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--mcore", str(directory), "--out", str(tmp / "out")]) == 2
    error = capsys.readouterr().err
    assert "--model" not in error and "missing tensor" in error, error  # the card was found; the tensors are not


def test_no_stored_card_names_model(converted, capsys: pytest.CaptureFixture) -> None:
    _, _, tmp = converted
    directory = tmp / f"bare{random.randrange(10**6)}"
    save_streaming(directory, [], {}, dict, {"args": argparse.Namespace(num_layers=random.randrange(1, 9))})
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--mcore", str(directory), "--out", str(tmp / "out")]) == 2
    error = capsys.readouterr().err
    assert f"--mcore {directory} stores no card" in error and "pass --model CARD" in error, error
    shutil.rmtree(directory)
