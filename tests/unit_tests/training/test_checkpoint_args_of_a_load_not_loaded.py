"""Under ``--use-checkpoint-args`` megatron-core 0.19.2's ``parse_and_validate_args``
(``megatron/training/arguments.py``) calls ``load_args_from_checkpoint`` for ``--pretrained-checkpoint``, then for
``--load``; each reads what ``_load_base_checkpoint`` finds there, which needs no tracker in ``--load`` for a
``--ckpt-step`` or a newer global non-persistent checkpoint. ``load_checkpoint`` itself falls back to
``--pretrained-checkpoint`` whenever ``--load`` has no tracker. So a run can load the pretrained checkpoint while
taking arguments from ``--load``'s: one of another card is refused, naming ``--load``."""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import PRETRAINED, read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

CARD = "qwen3-30b-a3b-tiny"
OTHER = "qwen3-30b-a3b"
"""A card of another shape (only the stored arguments of its checkpoints are read)."""


def _card_args(card: str, *flags: str) -> argparse.Namespace:
    """A run's arguments as the entry parses them before megatron reads a checkpoint."""
    return parse_oellm_argv(merge_card_flags(["--oellm-model", card, *flags]).argv)


def _refusal(load: Path) -> str:
    """The refusal naming ``--load load``'s checkpoint of :data:`OTHER` (its expert count against the card's)."""
    return (rf"--use-checkpoint-args would take architecture arguments from --load {load} that differ from "
            rf"--oellm-model {CARD}'s .*num_experts: checkpoint {get_card(OTHER).num_experts}, card "
            rf"{get_card(CARD).num_experts}")


def test_a_ckpt_step_checkpoint_of_another_card_in_load_is_refused(tmp_path: Path) -> None:
    """``--load`` holds ``iter_N`` of another card and no tracker, ``--ckpt-step N``: the run loads
    ``--pretrained-checkpoint`` (the card's own) while megatron takes arguments from ``--load``'s ``iter_N``."""
    step = random.randrange(1, 10**6)
    pretrained = save_dist_checkpoint(tmp_path / "pretrained", _card_args(CARD), iteration=step)
    load = save_dist_checkpoint(tmp_path / "load", _card_args(OTHER), iteration=step)
    (load / "latest_checkpointed_iteration.txt").unlink()
    run = _card_args(CARD, "--pretrained-checkpoint", str(pretrained), "--load", str(load), "--ckpt-step", str(step),
                     "--ckpt-format", "torch_dist", "--use-checkpoint-args")
    loaded = read_loaded_checkpoint(run)
    assert loaded is not None and loaded.flag == PRETRAINED
    with pytest.raises(ValueError, match=_refusal(load)):
        load_checks.check_checkpoint_architecture(run, loaded)


def _argv(pretrained: Path, load: Path) -> list[str]:
    """A mock-data run of :data:`CARD` fine-tuning from ``pretrained`` with ``--load load`` under global
    non-persistent checkpoints and ``--use-checkpoint-args``."""
    return ["--oellm-model", CARD, "--oellm-backend", "torch", "--ckpt-format", "torch_dist", "--mock-data",
            "--seq-length", "64", "--tokenizer-type", "NullTokenizer", "--dist-ckpt-strictness", "log_unexpected",
            "--pretrained-checkpoint", str(pretrained), "--load", str(load), "--non-persistent-ckpt-type", "global",
            "--use-checkpoint-args"]


def test_a_non_persistent_checkpoint_of_another_card_in_load_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--load`` holds no tracker but a global non-persistent checkpoint of another card: the entry refuses the run
    that fine-tunes from the card's own ``--pretrained-checkpoint``, naming ``--load``; with the non-persistent
    checkpoint of the card's own, the run goes on."""
    pretrained = save_dist_checkpoint(tmp_path / "pretrained", _card_args(CARD))
    load = tmp_path / "load"
    save_dist_checkpoint(load / "non_persistent", _card_args(OTHER))
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _argv(pretrained, load))
    assert re.search(_refusal(load), line), line
    own = tmp_path / "own"
    save_dist_checkpoint(own / "non_persistent", _card_args(CARD))
    with pytest.raises(Reached):
        entry.main(_argv(pretrained, own))


def test_the_pretrained_checkpoint_is_named_first_as_megatron_reads_it_first(tmp_path: Path) -> None:
    """``--pretrained-checkpoint`` and ``--load`` both hold checkpoints of another card: megatron reads the former's
    arguments first, then the latter's, and the refusal names them in that order, the pretrained one (mutation
    audit 17)."""
    pretrained = save_dist_checkpoint(tmp_path / "pretrained", _card_args(OTHER), iteration=random.randrange(1, 10**6))
    load = save_dist_checkpoint(tmp_path / "load", _card_args(OTHER), iteration=random.randrange(1, 10**6))
    run = _card_args(CARD, "--pretrained-checkpoint", str(pretrained), "--load", str(load), "--ckpt-format",
                     "torch_dist", "--use-checkpoint-args")
    with pytest.raises(ValueError, match=rf"from --pretrained-checkpoint {pretrained} that differ"):
        load_checks.check_checkpoint_architecture(run, read_loaded_checkpoint(run))
