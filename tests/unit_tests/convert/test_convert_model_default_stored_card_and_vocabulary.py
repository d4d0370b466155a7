"""mcore-to-hf's ``--model`` default: a stored card that cannot convert the checkpoint (no longer registered, of a
family without a converter) is named as the stored one with ``--model`` as the fix, not as an unknown card the user
typed; without ``--model`` and ``--vocab-size`` the stored vocabulary is applied (hf-to-mcore's card record, or the
saving run's ``--vocab-size`` where its padding gives the checkpoint's rows) instead of a refusal asking for it."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from megatron.oellm import cards
from megatron.oellm.cli import main
from megatron.oellm.convert import to_mcore
from megatron.oellm.convert.dist_ckpt import save_streaming
from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.megatron_args import flags_to_argv, model_flags
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf


def _export(mcore: Path, out: Path) -> int:
    return main(["convert", "mcore-to-hf", "--mcore", str(mcore), "--out", str(out)])


def test_a_stored_card_no_longer_registered_names_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    name = f"qwen3-{random.randrange(100, 999)}b-gone"
    directory = tmp_path / "mcore"
    save_streaming(directory, [], {}, dict, {"oellm_card": {"name": name}})
    capsys.readouterr()
    assert _export(directory, tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert f"--mcore {directory} stores card {name!r} (unknown model {name!r}" in error, error
    assert error.rstrip().endswith("pass --model CARD (see `oellm models`)"), error


def test_a_stored_card_of_a_family_without_converter_names_model(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    name = random.choice([n for n, c in cards.PUBLISHED_CARDS.items() if c.family == "ckda_hybrid"])
    directory = tmp_path / "mcore"
    save_streaming(directory, [], {}, dict, {"args": argparse.Namespace(oellm_model=name)})
    capsys.readouterr()
    assert _export(directory, tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert f"stores card {name!r} ({name}: family 'ckda_hybrid' has no checkpoint converter" in error, error
    assert "pass --model CARD" in error


def test_the_stored_cards_vocabulary_is_applied(tiny_hf, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = tiny_hf
    vocab = card.vocab_size + random.choice([-1, 1]) * random.randrange(1, 200)
    run_card = card.with_vocab(vocab)
    write_hf(run_card, random_hf_tensors(run_card, seed=random.randrange(10**6)), tmp / "hf")
    to_mcore.hf_to_mcore_checkpoint(run_card, tmp / "hf", tmp / "mcore")
    capsys.readouterr()
    assert _export(tmp / "mcore", tmp / "out") == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"oellm convert mcore-to-hf: {card.name} (the checkpoint's card) with the checkpoint's "
                            f"vocabulary {vocab}: read "), first


def _training_run(card: cards.ModelCard, tmp: Path, monkeypatch: pytest.MonkeyPatch, stored: dict,
                  rows: int, record: bool) -> Path:
    """A checkpoint of ``card`` with ``rows`` vocabulary rows whose stored run arguments hold ``stored`` (and
    hf-to-mcore's card record only where ``record``)."""
    hf_card = card.with_vocab(rows)
    write_hf(hf_card, random_hf_tensors(hf_card, seed=random.randrange(10**6)), tmp / "hf")
    if not record:  # a training run stores no HF config either
        (tmp / "hf" / "config.json").unlink()
    run = vars(parse_oellm_argv(flags_to_argv(model_flags(card)))) | stored
    base = to_mcore.megatron_checkpoint_args
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args", lambda c: argparse.Namespace(**{**run, **vars(base(c))}))
    if not record:
        monkeypatch.setattr(to_mcore, "card_record", lambda c: None)
    to_mcore.hf_to_mcore_checkpoint(hf_card, tmp / "hf", tmp / "mcore")
    return tmp / "mcore"


def test_a_training_runs_vocabulary_is_applied_where_its_padding_gives_the_rows(
        tiny_hf, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = tiny_hf
    vocab, tp, divisor = card.vocab_size + random.randrange(1, 300), random.choice([1, 2, 4]), random.choice([64, 128])
    padded = megatron_padded_vocab(vocab, tp, divisor)
    mcore = _training_run(card, tmp, monkeypatch, {"oellm_model": card.name, "vocab_size": vocab,
                                                   "tensor_model_parallel_size": tp,
                                                   "make_vocab_size_divisible_by": divisor}, padded, record=False)
    capsys.readouterr()
    assert _export(mcore, tmp / "out") == 0
    report = capsys.readouterr().out
    assert f"(the checkpoint's card) with the checkpoint's vocabulary {vocab}: read " in report.splitlines()[0], report
    if padded > vocab:
        assert f"dropped {padded - vocab} vocabulary padding rows" in report, report
