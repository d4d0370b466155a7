"""``--use-checkpoint-args`` at a tensor-parallel size that does not divide the checkpoint's padded vocabulary.

megatron-core 0.19.2's ``load_args_from_checkpoint`` keeps the ``padded_vocab_size`` the checkpoint stores at any TP
(no flag sets one, so the tokenizer never pads for the run's TP), and its vocab-parallel embedding and output layer
stop on an assertion on every rank when the model is built, after GPU set-up. ``oellm plan`` refuses that case; the
training entry now refuses it before megatron starts, in the plan's words. The checkpoints here are ``torch_dist``
ones as megatron-core writes them (``iter_XXXXXXX`` with a ``common.pt`` holding the run arguments and
``checkpoint_version`` 3.0, and ``latest_checkpointed_iteration.txt``), whose arguments megatron-core's own reader
takes as the tests say.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.plan import checkpoint_vocab_not_split
from megatron.oellm.training import load_checks
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import checkpoint_with_args, entry_args, finetune_argv
from tests.unit_tests.training.entry_helpers import (
    Reached,
    entry_on_a_cpu_node,
    entry_up_to_pretrain,
    refused_line,
)

RUN_TP = ["--tensor-model-parallel-size", "2", "--sequence-parallel"]
"""The run's tensor-parallel size: one the tiny card's 4 heads and 2 query groups split over (with the sequence
parallelism megatron-core's MoE layer needs beside it)."""


def odd_padded_vocabulary() -> int:
    """A padded vocabulary 2 does not divide: one saved at TP 1 with ``--make-vocab-size-divisible-by 1`` (above the
    tiny card's 512 tokens)."""
    return 2 * random.randrange(256, 2048) + 1


def even_padded_vocabulary() -> int:
    """A padded vocabulary saved at TP 2 with megatron's default divisor of 128."""
    return 256 * random.randrange(2, 64)


def saved(directory: Path, padded: int, tp: int, *, version: float | None = 3.0) -> Path:
    """A ``torch_dist`` checkpoint in ``directory`` of a run that padded its vocabulary to ``padded`` rows at TP
    ``tp``, its common state with ``checkpoint_version`` ``version`` as megatron-core 0.19.2 saves it (None: an
    older checkpoint without one). Returns ``directory``."""
    checkpoint_with_args(directory, padded_vocab_size=padded, tensor_model_parallel_size=tp,
                         make_vocab_size_divisible_by=128 if padded % 2 == 0 else 1)
    if version is not None:
        [common] = directory.glob("iter_*/common.pt")
        state = torch.load(common, weights_only=False)
        torch.save({**state, "checkpoint_version": version}, common)
    return directory


def megatron_taken(argv: list[str]) -> argparse.Namespace:
    """``argv``'s arguments after megatron-core's own ``load_args_from_checkpoint``, as its
    ``parse_and_validate_args`` calls it under ``--use-checkpoint-args``: ``--pretrained-checkpoint``'s, then
    ``--load``'s."""
    from megatron.training import checkpointing

    run = entry_args(argv)
    run.use_dist_ckpt = True
    checkpointing.load_args_from_checkpoint(run, load_arg="pretrained_checkpoint")
    checkpointing.load_args_from_checkpoint(run)
    return run


def vocabulary_check(argv: list[str]) -> None:
    """The entry's check of ``argv``, with the checkpoints read as the entry reads them."""
    run = entry_args(argv)
    load_checks.check_checkpoint_padded_vocabulary(run, load_checks.checkpoint_args_sources(
        run, read_loaded_checkpoint(run)))


@pytest.mark.parametrize("node", ["training_node", "login_node"])
def test_a_checkpoints_padded_vocabulary_the_runs_tp_does_not_divide_is_refused_in_one_line(
        node: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """One error line naming the checkpoint, its padded vocabulary and the TP, in the plan's words, on a GPU node and
    on a login node (before megatron's validation there); at the TP it was saved with the run goes on."""
    padded = odd_padded_vocabulary()
    load = saved(tmp_path, padded, 1)
    taken = megatron_taken(finetune_argv(load, *RUN_TP))
    assert (taken.padded_vocab_size, taken.tensor_model_parallel_size) == (padded, 2)
    entry = entry_up_to_pretrain(monkeypatch) if node == "training_node" else entry_on_a_cpu_node(monkeypatch)
    line = refused_line(entry, capsys, finetune_argv(load, *RUN_TP))
    assert line == (f"{entry.PROG}: error: --load {load} stores a padded vocabulary of {padded} rows, which "
                    f"{checkpoint_vocab_not_split(2)}; run it at a TP that divides {padded} (the one it was saved "
                    "with, 1, does)")
    if node == "training_node":
        with pytest.raises(Reached):
            entry.main(finetune_argv(load))


def test_the_checkpoints_own_tensor_parallel_size_taken_with_it_passes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--use-mp-args-from-checkpoint-args`` takes the TP the checkpoint was saved with, which divides its padded
    vocabulary; from a checkpoint older than ``checkpoint_version`` 3 megatron-core keeps the command line's TP, and
    the run is refused."""
    padded = odd_padded_vocabulary()
    current, old = saved(tmp_path / "current", padded, 1), saved(tmp_path / "old", padded, 1, version=None)
    assert megatron_taken(finetune_argv(current, *RUN_TP, "--use-mp-args-from-checkpoint-args")
                          ).tensor_model_parallel_size == 1
    assert megatron_taken(finetune_argv(old, *RUN_TP, "--use-mp-args-from-checkpoint-args")
                          ).tensor_model_parallel_size == 2
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main(finetune_argv(current, *RUN_TP, "--use-mp-args-from-checkpoint-args"))
    with pytest.raises(ValueError, match=rf"^--load {old} stores a padded vocabulary of {padded} rows, which does not "
                                         r"split evenly over TP \(2\),"):
        vocabulary_check(finetune_argv(old, *RUN_TP, "--use-mp-args-from-checkpoint-args"))


@pytest.mark.parametrize("odd_one", ["--pretrained-checkpoint", "--load"])
def test_the_first_checkpoint_storing_a_padded_vocabulary_is_the_one_judged(odd_one: str, tmp_path: Path) -> None:
    """megatron-core takes ``--pretrained-checkpoint``'s padded vocabulary, ``--load``'s only where that one stores
    none: the refusal names the one taken, and a padded vocabulary megatron does not take is not refused."""
    odd, even = odd_padded_vocabulary(), even_padded_vocabulary()
    pretrained = saved(tmp_path / "pretrained", odd if odd_one == "--pretrained-checkpoint" else even, 1)
    load = saved(tmp_path / "load", even if odd_one == "--pretrained-checkpoint" else odd, 1)
    argv = finetune_argv(load, *RUN_TP, "--pretrained-checkpoint", str(pretrained))
    taken = megatron_taken(argv).padded_vocab_size
    if odd_one == "--pretrained-checkpoint":
        assert taken == odd
        with pytest.raises(ValueError, match=rf"^--pretrained-checkpoint {pretrained} stores a padded vocabulary of "
                                             rf"{odd} rows, which does not split evenly over TP \(2\),"):
            vocabulary_check(argv)
    else:
        assert taken == even
        vocabulary_check(argv)
        with pytest.raises(ValueError, match=rf"^--load {load} stores a padded vocabulary of {odd} rows,"):
            vocabulary_check(finetune_argv(load, *RUN_TP))


def test_without_use_checkpoint_args_the_tokenizer_pads_for_the_runs_tp(tmp_path: Path) -> None:
    """Without ``--use-checkpoint-args`` megatron pads the tokenizer's vocabulary for the run's TP: nothing is
    refused; with it, the same checkpoint is."""
    padded = odd_padded_vocabulary()
    load = saved(tmp_path, padded, 1)
    argv = finetune_argv(load, *RUN_TP)
    vocabulary_check([flag for flag in argv if flag != "--use-checkpoint-args"])
    with pytest.raises(ValueError, match=rf"stores a padded vocabulary of {padded} rows"):
        vocabulary_check(argv)


def test_a_padded_vocabulary_the_saved_tp_does_not_divide_either_is_refused_without_that_example(tmp_path: Path) -> None:
    """The refusal offers the TP the checkpoint was saved with only where that one divides its padded vocabulary: a
    checkpoint saved at the run's own TP 2 whose odd vocabulary it does not divide gets no such example."""
    padded = odd_padded_vocabulary()
    load = saved(tmp_path, padded, 2)
    with pytest.raises(ValueError) as refused:
        vocabulary_check(finetune_argv(load, *RUN_TP))
    assert str(refused.value) == (f"--load {load} stores a padded vocabulary of {padded} rows, which "
                                  f"{checkpoint_vocab_not_split(2)}; run it at a TP that divides {padded}")


@pytest.mark.parametrize("tp", ["zero", "negative"])
def test_a_tensor_parallel_size_below_one_is_left_to_megatrons_validation(tp: str, tmp_path: Path) -> None:
    """A TP below 1 is megatron's validation's to refuse, in its words: the check neither divides by it nor refuses
    the vocabulary for it."""
    load = saved(tmp_path, odd_padded_vocabulary(), 1)
    run = entry_args(finetune_argv(load, *RUN_TP))
    run.tensor_model_parallel_size = 0 if tp == "zero" else -2 * random.randint(1, 8)
    load_checks.check_checkpoint_padded_vocabulary(run, load_checks.checkpoint_args_sources(
        run, read_loaded_checkpoint(run)))


def test_the_last_checkpoints_tensor_parallel_size_is_the_one_built(tmp_path: Path) -> None:
    """``--use-mp-args-from-checkpoint-args`` takes each checkpoint's TP in turn, ``--load``'s last: the run is built
    at that one, not at ``--pretrained-checkpoint``'s, whose padded vocabulary it takes."""
    odd = odd_padded_vocabulary()
    pretrained = saved(tmp_path / "pretrained", odd, 1)
    load = saved(tmp_path / "load", even_padded_vocabulary(), 2)
    argv = finetune_argv(load, *RUN_TP, "--pretrained-checkpoint", str(pretrained), "--use-mp-args-from-checkpoint-args")
    taken = megatron_taken(argv)
    assert (taken.padded_vocab_size, taken.tensor_model_parallel_size) == (odd, 2)
    with pytest.raises(ValueError, match=rf"^--pretrained-checkpoint {pretrained} stores a padded vocabulary of "
                                         rf"{odd} rows, which does not split evenly over TP \(2\),"):
        vocabulary_check(argv)
