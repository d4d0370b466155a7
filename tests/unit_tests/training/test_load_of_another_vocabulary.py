"""A checkpoint of another vocabulary than the run's: megatron-core 0.19.2 compares no vocabulary under dist-ckpt and
loads only the embedding and output rows the run's model has (a checkpoint converted with ``--vocab-size 600``, trained
without it, loads its first 512 rows without a word). The entry compares the vocabulary the checkpoint stores (a
converted checkpoint's card, a training checkpoint's run arguments) with the run's and refuses, naming
``--vocab-size``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

CARD = "qwen3-30b-a3b-tiny"
ONE_GPU = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
           "expert_tensor_parallel_size": 1, "data_parallel_size": 1}


def _other_vocab() -> int:
    """A fresh vocabulary other than the card's, padded by megatron to more rows than the card's."""
    return get_card(CARD).vocab_size + random.randrange(1, 400)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """(checkpoint, vocabulary): fresh random HF weights of the card with another vocabulary, converted as
    ``oellm convert hf-to-mcore --vocab-size N`` converts them."""
    vocab = _other_vocab()
    card = get_card(CARD).with_vocab(vocab)
    tmp = tmp_path_factory.mktemp("vocab")
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    return tmp / "mcore", vocab


def _argv(*flags: str) -> list[str]:
    """A mock-data run of the card on the torch backend with ``flags``."""
    return ["--oellm-model", CARD, "--oellm-backend", "torch", "--ckpt-format", "torch_dist", "--mock-data",
            "--seq-length", "64", "--tokenizer-type", "NullTokenizer", "--dist-ckpt-strictness", "log_unexpected",
            *flags]


def test_a_converted_checkpoint_of_another_vocabulary_is_refused(converted: tuple[Path, int], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--load ... --finetune`` without ``--vocab-size`` (the card's) and ``--pretrained-checkpoint`` with another
    one: one line naming the checkpoint, both vocabularies and ``--vocab-size N``; with it, the run goes on."""
    checkpoint, vocab = converted
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _argv("--load", str(checkpoint), "--finetune"))
    assert f"error: --load {checkpoint} holds a checkpoint of a {vocab}-token vocabulary" in line
    assert f"the run's is {get_card(CARD).vocab_size}" in line and f"pass --vocab-size {vocab}" in line
    wrong = vocab - random.randrange(1, 300)
    flags = ("--load", str(tmp_path / "run"), "--pretrained-checkpoint", str(checkpoint), "--vocab-size", str(wrong))
    line = refused_line(entry, capsys, _argv(*flags))
    assert f"error: --pretrained-checkpoint {checkpoint} holds a checkpoint of a {vocab}-token vocabulary" in line
    assert f"the run's is {wrong}" in line and f"pass --vocab-size {vocab}" in line
    with pytest.raises(Reached):
        entry.main(_argv("--load", str(checkpoint), "--finetune", "--vocab-size", str(vocab)))
    with pytest.raises(Reached):
        entry.main(_argv(*flags[:4], "--vocab-size", str(vocab)))


def test_a_training_checkpoint_of_another_vocabulary_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A resume (``--load``, no ``--finetune``) of a checkpoint whose run trained ``--vocab-size N``, without it:
    refused naming N; with it, the run goes on."""
    vocab = _other_vocab()
    stored = stored_args(**ONE_GPU, vocab_size=vocab, padded_vocab_size=megatron_padded_vocab(vocab),
                         make_vocab_size_divisible_by=128)
    run = save_dist_checkpoint(tmp_path / "run", stored, iteration=random.randrange(1, 10**6))
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _argv("--load", str(run), "--save", str(run), "--save-interval", "1000"))
    assert f"error: --load {run} holds a checkpoint of a {vocab}-token vocabulary" in line
    assert f"pass --vocab-size {vocab}" in line
    with pytest.raises(Reached):
        entry.main(_argv("--load", str(run), "--save", str(run), "--save-interval", "1000", "--vocab-size", str(vocab)))


def _parsed(*flags: str):
    """The run's arguments as the entry parses them before megatron initialises."""
    return parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, *flags]).argv)


def test_a_padded_vocabulary_alone_is_compared_as_megatron_padded_it(tmp_path: Path) -> None:
    """A checkpoint storing only the padded vocabulary (a run whose tokenizer gave the vocabulary, not
    ``--vocab-size``): a run vocabulary megatron pads to the same rows at the saving run's TP and divisor passes,
    one padded to other rows is refused naming the padded size."""
    tp, divisor = random.choice([1, 2, 4]), random.choice([64, 128])
    vocab = _other_vocab()
    padded = megatron_padded_vocab(vocab, tp, divisor)
    stored = stored_args(**{**ONE_GPU, "tensor_model_parallel_size": tp}, vocab_size=None, padded_vocab_size=padded,
                         make_vocab_size_divisible_by=divisor)
    run = save_dist_checkpoint(tmp_path / "run", stored, iteration=random.randrange(1, 10**6))
    same = _parsed("--load", str(run), "--tokenizer-type", "NullTokenizer", "--vocab-size",
                   str(padded - random.randrange(0, divisor * tp)))
    load_checks.check_checkpoint_vocabulary(same, read_loaded_checkpoint(same), vocab_given=True)
    other = _parsed("--load", str(run), "--tokenizer-type", "NullTokenizer", "--vocab-size",
                    str(padded - divisor * tp - random.randrange(0, 100)))
    with pytest.raises(ValueError, match=rf"padded to {padded} rows.*pass the saving run's --vocab-size"):
        load_checks.check_checkpoint_vocabulary(other, read_loaded_checkpoint(other), vocab_given=True)


def test_a_checkpoint_without_a_stored_vocabulary_is_left_to_megatron(tmp_path: Path) -> None:
    """Stored arguments naming no vocabulary (another program's checkpoint) and a run without ``--vocab-size``
    (megatron's flags alone, a tokenizer that gives it) compare nothing."""
    stored = stored_args(**ONE_GPU)
    run = save_dist_checkpoint(tmp_path / "run", stored, iteration=random.randrange(1, 10**6))
    parsed = _parsed("--load", str(run), "--vocab-size", str(_other_vocab()))
    load_checks.check_checkpoint_vocabulary(parsed, read_loaded_checkpoint(parsed), vocab_given=True)
    stored.vocab_size = _other_vocab()
    other = save_dist_checkpoint(tmp_path / "other", stored, iteration=random.randrange(1, 10**6))
    parsed = _parsed("--load", str(other))
    parsed.vocab_size = None
    load_checks.check_checkpoint_vocabulary(parsed, read_loaded_checkpoint(parsed), vocab_given=True)
