"""``--hf-config`` of the original model for a run that trained a smaller vocabulary: token ids the original config
or generation config states past the export's vocabulary are refused before anything is written, naming each id and
its file (transformers refused to load the export: "Padding_idx must be within num_embeddings"); ids that fit are
written, and the note says they are the original tokenizer's."""

from __future__ import annotations

import json
import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.hf_config import read_config_files
from megatron.oellm.convert.mcore_checkpoint import HF_CONFIG_KEY, RELEASE
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import edit_json, random_hf_tensors, write_hf


@pytest.fixture
def smaller_vocab(tiny_hf):
    """(card, the run's smaller vocabulary, a megatron checkpoint of it, the card's original HF model folder)."""
    card, _, tmp = tiny_hf
    vocab = random.randrange(card.vocab_size // 4, card.vocab_size - 8)
    run_card = card.with_vocab(vocab)
    write_hf(run_card, random_hf_tensors(run_card, seed=random.randrange(10**6)), tmp / "hf-run")
    hf_to_mcore_checkpoint(run_card, tmp / "hf-run", tmp / "mcore")
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp / "original")
    return card, vocab, tmp / "mcore", tmp / "original"


def _convert(card, vocab: int, mcore, original, out) -> int:
    return main(["convert", "mcore-to-hf", "--model", card.name, "--vocab-size", str(vocab), "--mcore", str(mcore),
                 "--out", str(out), "--hf-config", str(original)])


def test_ids_past_the_vocabulary_are_refused_before_writing(smaller_vocab, tmp_path,
                                                            capsys: pytest.CaptureFixture) -> None:
    card, vocab, mcore, original = smaller_vocab
    bos, pad, eos, eos2 = random.sample(range(vocab, card.vocab_size), 4)
    edit_json(original / "config.json", bos_token_id=bos, pad_token_id=pad, eos_token_id=eos)
    (original / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, eos2],
                                                                 "bos_token_id": random.randrange(vocab)}))
    capsys.readouterr()
    assert _convert(card, vocab, mcore, original, tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert f"past the export's vocabulary of {vocab}" in error, error
    for named in (f"config.json bos_token_id {bos}", f"config.json pad_token_id {pad}",
                  f"config.json eos_token_id {eos}", f"generation_config.json eos_token_id [{eos}, {eos2}]"):
        assert named in error, (named, error)
    assert "generation_config.json bos_token_id" not in error
    assert f"copy {original}" in error and "--hf-config COPY" in error
    assert not (tmp_path / "out").exists()


def test_an_id_past_it_in_text_config_is_refused(smaller_vocab, tmp_path, capsys: pytest.CaptureFixture) -> None:
    card, vocab, mcore, original = smaller_vocab
    config = json.loads((original / "config.json").read_text())
    pad = random.randrange(vocab, card.vocab_size)
    config["text_config"] = {**config, "pad_token_id": pad}
    (original / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert _convert(card, vocab, mcore, original, tmp_path / "out") == 2
    assert f"pad_token_id {pad}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_ids_within_it_are_written_and_named_as_the_original_tokenizers(smaller_vocab, tmp_path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    card, vocab, mcore, original = smaller_vocab
    bos, pad, eos, eos2 = random.sample(range(vocab), 4)
    edit_json(original / "config.json", bos_token_id=bos, pad_token_id=pad, eos_token_id=eos)
    (original / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, eos2]}))
    capsys.readouterr()
    assert _convert(card, vocab, mcore, original, tmp_path / "out") == 0
    report = capsys.readouterr().out
    assert "are the original tokenizer's" in report and f"eos_token_id [{eos}, {eos2}]" in report, report
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (written["vocab_size"], written["pad_token_id"], written["eos_token_id"]) == (vocab, pad, eos)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.get_input_embeddings().num_embeddings == vocab


def test_ids_past_it_in_the_config_files_stored_with_the_checkpoint_are_refused_naming_them(
        smaller_vocab, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The config files kept with the checkpoint get the same check as ``--hf-config``'s; the refusal names them as
    the stored files (not as their config.json alone: an id may be generation_config.json's) and how to pass edited
    copies, since there is no --hf-config folder to copy."""
    card, vocab, mcore, original = smaller_vocab
    eos = random.randrange(vocab, card.vocab_size)
    (original / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    common = CheckpointReader(mcore / RELEASE).common_state()
    stored = read_config_files(original)
    monkeypatch.setattr(CheckpointReader, "common_state", lambda reader: {**common, HF_CONFIG_KEY: stored})
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--vocab-size", str(vocab), "--mcore", str(mcore),
                 "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"the HF config stored with {mcore / RELEASE} states token ids past the export's vocabulary" in error
    assert f"generation_config.json eos_token_id {eos}" in error and "pass --hf-config FOLDER" in error, error
    assert not (tmp_path / "out").exists()
