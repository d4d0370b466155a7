"""The vocabulary check compares only a vocabulary megatron-core 0.19.2 takes from ``--vocab-size``: a tokenizer that
gives its own (HuggingFace, SentencePiece, ...) and ``--use-checkpoint-args`` (megatron takes the checkpoint's
``padded_vocab_size``) were refused for the card's ``--vocab-size`` they ignore. A larger run vocabulary than the
checkpoint's is a vocabulary extension: megatron zero-fills the embedding and output rows past the checkpoint's, so
the run goes on with a note, unless it also reads the checkpoint's optimizer state."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

CARD = "qwen3-30b-a3b-tiny"
ONE_GPU = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
           "expert_tensor_parallel_size": 1, "data_parallel_size": 1}


def _trained(folder: Path, vocab: int | None, padded: int, tokenizer: str | None = "NullTokenizer") -> Path:
    """A training checkpoint whose run stored ``--vocab-size vocab`` (None: none), ``padded`` rows and ``tokenizer``."""
    stored = stored_args(**ONE_GPU, vocab_size=vocab, padded_vocab_size=padded, make_vocab_size_divisible_by=128,
                         tokenizer_type=tokenizer, seq_length=64)
    return save_dist_checkpoint(folder, stored, iteration=random.randrange(1, 10**6))


def _parsed(*flags: str):
    """The run's arguments as the entry parses them before megatron initialises."""
    return parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, *flags]).argv)


def _argv(*flags: str) -> list[str]:
    """A mock-data run of the card on the torch backend with ``flags``."""
    return ["--oellm-model", CARD, "--oellm-backend", "torch", "--ckpt-format", "torch_dist", "--mock-data",
            "--seq-length", "64", "--tokenizer-type", "NullTokenizer", "--dist-ckpt-strictness", "log_unexpected",
            *flags]


@pytest.mark.parametrize("tokenizer", ["HuggingFaceTokenizer", "SentencePieceTokenizer", "GPT2BPETokenizer"])
def test_a_tokenizer_giving_its_vocabulary_is_not_compared(tokenizer: str, tmp_path: Path) -> None:
    """A checkpoint padded to other rows than the card's ``--vocab-size`` would give: megatron ignores that flag for
    these tokenizers, so nothing is compared."""
    vocab = random.randrange(100, 400)
    run = _trained(tmp_path / "run", None, megatron_padded_vocab(vocab, 1, 128), tokenizer)
    parsed = _parsed("--load", str(run), "--tokenizer-type", tokenizer, "--tokenizer-model", str(tmp_path / "tok"))
    load_checks.check_checkpoint_vocabulary(parsed, read_loaded_checkpoint(parsed), vocab_given=True)


def test_use_checkpoint_args_takes_the_checkpoints_vocabulary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that trained another ``--vocab-size``, resumed with ``--use-checkpoint-args`` and none: goes on."""
    vocab = get_card(CARD).vocab_size + random.randrange(200, 600)
    run = _trained(tmp_path / "run", vocab, megatron_padded_vocab(vocab, 1, 128))
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main(_argv("--load", str(run), "--use-checkpoint-args"))


@pytest.mark.parametrize("fine_tune", ["--finetune", "--pretrained-checkpoint", "--no-load-optim"])
def test_a_vocabulary_extension_goes_on_with_a_note(fine_tune: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A larger ``--vocab-size`` than the checkpoint's, reading no optimizer state: the run goes on, noting that the
    rows past the checkpoint's start as zeros."""
    vocab = random.randrange(200, 500)
    padded = megatron_padded_vocab(vocab, 1, 128)
    run = _trained(tmp_path / "ckpt", vocab, padded)
    larger = str(vocab + random.randrange(1, 300))
    where = (["--load", str(tmp_path / "run"), "--pretrained-checkpoint", str(run)] if fine_tune.startswith("--pre")
             else ["--load", str(run), fine_tune])
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main(_argv(*where, "--vocab-size", larger))
    out = capsys.readouterr().out
    flag = "--pretrained-checkpoint" if fine_tune.startswith("--pre") else "--load"
    assert f"note: {flag} {run} holds a checkpoint of a {vocab}-token vocabulary" in out
    assert ("megatron-core loads the embedding and output rows the checkpoint holds and starts any beyond them as "
            f"zeros; the tokens past {vocab} were not in the vocabulary it was trained with") in out
    assert "untrained" not in out


@pytest.mark.parametrize("fine_tune", ["--finetune", "--no-load-optim"])
def test_a_smaller_stored_vocabulary_under_the_cards_is_refused(fine_tune: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--vocab-size`` the run takes the card's: a checkpoint of fewer tokens is most likely a job that forgot
    the flag, even where both pad to the same rows (no zero-filled row then), so it is refused naming both ways."""
    card_vocab = get_card(CARD).vocab_size
    vocab = random.randrange(card_vocab - 100, card_vocab)
    run = _trained(tmp_path / "ckpt", vocab, megatron_padded_vocab(vocab, 1, 128))
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _argv("--load", str(run), fine_tune))
    assert line.endswith(f"holds a checkpoint of a {vocab}-token vocabulary, fewer than the {card_vocab} of the card, "
                         f"which the run takes without --vocab-size; pass --vocab-size {vocab} to train it as saved, "
                         f"or --vocab-size {card_vocab} to extend its vocabulary")
    with pytest.raises(Reached):
        entry.main(_argv("--load", str(run), fine_tune, "--vocab-size", str(card_vocab)))


def test_the_entry_parses_the_users_flags_once_to_tell_a_given_vocabulary(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether ``--vocab-size`` is the user's comes from the card merge's own parse of the user's command line
    (``MergedArgv.user_destinations``): the entry parses that line for its destinations once, and still goes on
    with the flag given (the refusal without it: the test above)."""
    from megatron.oellm.training import args, entry

    card_vocab = get_card(CARD).vocab_size
    vocab = random.randrange(card_vocab - 100, card_vocab)
    user_argv = _argv("--load", str(_trained(tmp_path / "ckpt", vocab, megatron_padded_vocab(vocab, 1, 128))),
                      "--finetune", "--vocab-size", str(card_vocab))
    parsed_lines = []
    explicit_destinations = args.explicit_destinations

    def counted(argv):
        parsed_lines.append(list(argv))
        return explicit_destinations(argv)

    main = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(args, "explicit_destinations", counted)
    monkeypatch.setattr(entry, "explicit_destinations", counted)
    with pytest.raises(Reached):
        main.main(user_argv)
    assert parsed_lines.count(user_argv) == 1


def test_an_extension_of_a_resumed_optimizer_state_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A plain resume with a larger ``--vocab-size``: refused naming both fixes; a smaller one still refused."""
    vocab = random.randrange(200, 500)
    run = _trained(tmp_path / "run", vocab, megatron_padded_vocab(vocab, 1, 128))
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _argv("--load", str(run), "--vocab-size", str(vocab + random.randrange(1, 99))))
    assert "also loads its optimizer state" in line and f"pass --vocab-size {vocab} to resume it" in line
    assert "add --finetune (or --no-load-optim)" in line
    smaller = str(vocab - random.randrange(1, 150))
    line = refused_line(entry, capsys, _argv("--load", str(run), "--finetune", "--vocab-size", smaller))
    assert f"holds a checkpoint of a {vocab}-token vocabulary, while the run's is {smaller}" in line


def test_without_a_card_the_vocabulary_on_the_command_line_is_the_users(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--oellm-model`` no card fills in ``--vocab-size``: a run stating the card's flags itself gave its
    vocabulary, so a larger one than the checkpoint's is an extension noted, not a forgotten flag refused."""
    vocab = random.randrange(200, 500)
    run = _trained(tmp_path / "ckpt", vocab, megatron_padded_vocab(vocab, 1, 128))
    card_flags = merge_card_flags(_argv("--vocab-size", str(vocab + random.randrange(1, 300)))).argv
    without_card = card_flags[2:]
    assert card_flags[:2] == ["--oellm-model", CARD] and "--oellm-model" not in without_card
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main([*without_card, "--load", str(run), "--finetune"])
    assert f"note: --load {run} holds a checkpoint of a {vocab}-token vocabulary" in capsys.readouterr().out
