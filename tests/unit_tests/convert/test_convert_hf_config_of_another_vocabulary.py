"""``--hf-config`` of the original model for a run that trained another vocabulary: a config whose only difference
from the card is ``vocab_size`` is written with the export's vocabulary, and a note says so. It was refused with
"pass --vocab-size <the config's>", which the checkpoint's rows then refused in turn."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.hf_config import read_config_files
from megatron.oellm.convert.mcore_checkpoint import HF_CONFIG_KEY, RELEASE
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import edit_json, random_hf_tensors, write_hf


@pytest.fixture
def other_vocab(tiny_hf):
    """(card, the run's vocabulary, a megatron checkpoint of it, the card's original HF model folder)."""
    card, _, tmp = tiny_hf
    vocab = card.vocab_size + random.randrange(1, 300)
    run_card = card.with_vocab(vocab)
    write_hf(run_card, random_hf_tensors(run_card, seed=random.randrange(10**6)), tmp / "hf-run")
    hf_to_mcore_checkpoint(run_card, tmp / "hf-run", tmp / "mcore")
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp / "original")
    edit_json(tmp / "original" / "config.json", bos_token_id=random.randrange(card.vocab_size))
    return card, vocab, tmp / "mcore", tmp / "original"


def test_the_original_config_is_written_with_the_exports_vocabulary(other_vocab, tmp_path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    card, vocab, mcore, original = other_vocab
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--vocab-size", str(vocab), "--mcore", str(mcore),
                 "--out", str(tmp_path / "out"), "--hf-config", str(original)]) == 0
    report = capsys.readouterr().out
    assert (f"its vocab_size {card.vocab_size} is set to the export's vocabulary of {vocab} (the run trained "
            "another), every other field as given") in report, report
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    given = json.loads((original / "config.json").read_text())
    assert written == {**given, "vocab_size": vocab}


def test_another_difference_is_still_refused(other_vocab, tmp_path, capsys: pytest.CaptureFixture) -> None:
    card, vocab, mcore, original = other_vocab
    edited = tmp_path / "edited"
    shutil.copytree(original, edited)
    layers = card.num_layers + random.randrange(1, 5)
    edit_json(edited / "config.json", num_hidden_layers=layers)
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--vocab-size", str(vocab), "--mcore", str(mcore),
                 "--out", str(tmp_path / "out"), "--hf-config", str(edited)]) == 2
    error = capsys.readouterr().err
    assert f"num_hidden_layers: checkpoint {layers}" in error and f"vocab_size: checkpoint {card.vocab_size}" in error
    assert "give --hf-config the directory of this checkpoint's own HF model" in error
    assert not (tmp_path / "out").exists()


def test_a_stored_config_of_another_vocabulary_exports_as_the_same_hf_config(other_vocab, tmp_path,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture) -> None:
    """A checkpoint whose vocabulary grew past the one of the HF config stored with it (the original model's) was
    refused with "pass --vocab-size <the config's>", which its card record and rows then refused in turn, while the
    same file given as ``--hf-config`` exported: both now write the same config. A stored config that differs in
    another field too is still refused, naming every field and pointing to the card."""
    card, vocab, mcore, original = other_vocab
    common = CheckpointReader(mcore / RELEASE).common_state()
    stored = read_config_files(original)
    monkeypatch.setattr(CheckpointReader, "common_state", lambda reader: {**common, HF_CONFIG_KEY: stored})
    export = ["convert", "mcore-to-hf", "--model", card.name, "--vocab-size", str(vocab), "--mcore", str(mcore)]
    assert main([*export, "--out", str(tmp_path / "given"), "--hf-config", str(original)]) == 0
    capsys.readouterr()
    assert main([*export, "--out", str(tmp_path / "kept")]) == 0
    report = capsys.readouterr().out
    assert (f"its vocab_size {card.vocab_size} is set to the export's vocabulary of {vocab} (the run trained "
            "another), every other field as given") in report, report
    assert read_config_files(tmp_path / "kept") == read_config_files(tmp_path / "given")
    layers = card.num_layers + random.randrange(1, 5)
    stored["config.json"] = json.dumps({**json.loads(stored["config.json"]), "num_hidden_layers": layers})
    assert main([*export, "--out", str(tmp_path / "other")]) == 2
    error = capsys.readouterr().err
    assert f"num_hidden_layers: checkpoint {layers}" in error and f"vocab_size: checkpoint {card.vocab_size}" in error
    assert "the config.json stored with" in error and "pick the card of this checkpoint with --model" in error
    assert not (tmp_path / "other").exists()
