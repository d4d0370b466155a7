"""A run without a sequence length under ``--use-checkpoint-args`` whose checkpoints store none is refused in one line.

The entry left the sequence length to the checkpoint under ``--use-checkpoint-args``; in the first job of a chain
(nothing saved in ``--load`` yet) or from a checkpoint saved without run arguments, megatron kept the command line's
missing value and stopped on its bare ``assert args.encoder_seq_length is not None``. ``--seq-length`` beside
``--encoder-seq-length`` ended in megatron's bare ``assert args.encoder_seq_length is None``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training.args import check_sequence_given, merge_card_flags, parse_oellm_argv
from megatron.oellm.training.load_checks import check_checkpoint_sequence_length
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import save_args_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain, one_error_line, tiny_moe_run

CARD = "qwen3-30b-a3b-tiny"


def _without_seq_length(*extra: str) -> list[str]:
    """The tiny MoE run without its ``--seq-length``, with ``extra``."""
    run = tiny_moe_run(CARD)
    at = run.index("--seq-length")
    return [*run[:at], *run[at + 2:], *extra]


def _checked(argv: list[str]) -> None:
    """The entry's sequence-length check of ``argv``, the loaded checkpoint read as the entry reads it."""
    args = parse_oellm_argv(merge_card_flags(argv).argv)
    check_checkpoint_sequence_length(args, read_loaded_checkpoint(args))


def test_the_first_job_of_a_chain_is_refused_naming_the_folder(monkeypatch: pytest.MonkeyPatch, capsys,
                                                               tmp_path: Path) -> None:
    folder = tmp_path / f"chain{random.randrange(10**6)}"
    folder.mkdir()
    main = entry_up_to_pretrain(monkeypatch)
    argv = _without_seq_length("--use-checkpoint-args", "--load", str(folder), "--save", str(folder),
                               "--save-interval", "5")
    assert main.main(argv) == 2
    line = one_error_line(capsys)
    assert f"--load {folder}" in line and "--use-checkpoint-args" in line
    assert f"give --seq-length (model card {CARD} plans with {get_card(CARD).seq_length})" in line


def test_a_checkpoint_without_a_stored_sequence_length_is_refused(tmp_path: Path) -> None:
    iteration = random.randrange(1, 10**4)
    save_args_checkpoint("torch", tmp_path, stored_args(seq_length=None), iteration)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    with pytest.raises(ValueError, match=r"--load .* holds no checkpoint that stores a sequence length.*--seq-length"):
        _checked(_without_seq_length("--use-checkpoint-args", "--load", str(tmp_path), "--ckpt-format", "torch"))


def test_a_checkpoint_storing_one_or_a_given_length_passes(tmp_path: Path) -> None:
    iteration, length = random.randrange(1, 10**4), random.choice([64, 96, 128])
    save_args_checkpoint("torch", tmp_path, stored_args(seq_length=length), iteration)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    _checked(_without_seq_length("--use-checkpoint-args", "--load", str(tmp_path), "--ckpt-format", "torch"))
    empty = tmp_path / "empty"
    empty.mkdir()
    _checked(_without_seq_length("--use-checkpoint-args", "--load", str(empty), "--seq-length", str(length)))


def test_seq_length_beside_encoder_seq_length_is_refused() -> None:
    length = random.choice([64, 96, 128])
    args = parse_oellm_argv(merge_card_flags(_without_seq_length("--seq-length", str(length),
                                                                 "--encoder-seq-length", str(length))).argv)
    with pytest.raises(ValueError, match=f"--seq-length {length} and --encoder-seq-length {length}.*--seq-length only"):
        check_sequence_given(args)


def test_use_checkpoint_args_without_a_checkpoint_folder_is_left_to_megatron() -> None:
    """``--use-checkpoint-args`` with neither ``--load`` nor ``--pretrained-checkpoint`` names no folder to blame:
    the sequence-length check passes it on (megatron's own assertion names the flags it needs) rather than refusing
    it with an empty folder list."""
    _checked(_without_seq_length("--use-checkpoint-args"))
