"""A checkpoint megatron-oellm wrote for another card, loaded without ``--use-checkpoint-args``: megatron's argument
checks pass it (none under ``--finetune`` / ``--pretrained-checkpoint``), and it fails on every rank once the card's
model is built. The entry compares the architecture the checkpoint stores with the run's and refuses first."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import converted_random_checkpoint, save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

RUN_CARD = "qwen3.5-35b-a3b-tiny"
CHECKPOINT_CARD = "qwen3-30b-a3b-tiny"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`CHECKPOINT_CARD`'s fresh random HF weights converted to a megatron checkpoint directory."""
    return converted_random_checkpoint(CHECKPOINT_CARD, tmp_path_factory.mktemp("other"))


def _argv(card: str, *flags: str) -> list[str]:
    """A mock-data run of ``card`` on the torch backend with ``flags``."""
    return ["--oellm-model", card, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--ckpt-format", "torch_dist", "--mock-data",
            "--seq-length", "64",
            "--dist-ckpt-strictness", "log_unexpected", *flags]


def _parsed(card: str, *flags: str):
    """A run's arguments as the entry parses them before megatron reads the checkpoint."""
    return parse_oellm_argv(merge_card_flags(["--oellm-model", card, *flags]).argv)


def _fields_named(line: str, run_card: str, checkpoint_card: str) -> None:
    """``line`` names the differing layer count (checkpoint vs run) and the checkpoint's card as the fix."""
    layers = (_parsed(checkpoint_card).num_layers, _parsed(run_card).num_layers)
    assert layers[0] != layers[1]
    assert f"num_layers: checkpoint {layers[0]}, run {layers[1]}" in line
    assert f"pass --oellm-model {checkpoint_card} to train from it" in line


@pytest.mark.parametrize("flags", [[], ["--finetune"]])
def test_a_converted_checkpoint_of_another_card_is_refused(converted: Path, flags: list[str],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--load`` of another card's converted checkpoint, with and without ``--finetune``: one error line naming the
    checkpoint, the fields and the fix; the checkpoint's own card goes on."""
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _argv(RUN_CARD, "--load", str(converted), *flags))
    assert f"error: --load {converted} holds a checkpoint of another model than --oellm-model {RUN_CARD}" in line
    _fields_named(line, RUN_CARD, CHECKPOINT_CARD)
    with pytest.raises(Reached):
        entry.main(_argv(CHECKPOINT_CARD, "--load", str(converted), "--finetune"))


def test_another_cards_pretrained_checkpoint_is_refused(converted: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--pretrained-checkpoint`` in place of an empty ``--load`` (megatron fine-tunes from it, comparing nothing)."""
    entry = entry_up_to_pretrain(monkeypatch)
    flags = ("--load", str(tmp_path / "run"), "--pretrained-checkpoint", str(converted))
    line = refused_line(entry, capsys, _argv(RUN_CARD, *flags))
    assert f"error: --pretrained-checkpoint {converted} holds a checkpoint of another model" in line
    _fields_named(line, RUN_CARD, CHECKPOINT_CARD)


def test_a_training_checkpoint_of_another_card_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint the training entry saved for another card (its arguments name the card): refused naming it. One of
    the run's own card passes, also under another pipeline split of its hybrid pattern (``|`` is no architecture),
    and so does one another program saved (no ``oellm_model`` in its arguments: left to megatron)."""
    entry = entry_up_to_pretrain(monkeypatch)
    layout = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
              "expert_tensor_parallel_size": 1, "data_parallel_size": 1}
    other = save_dist_checkpoint(tmp_path / "other", stored_args(**layout), iteration=random.randrange(1, 10**6))
    line = refused_line(entry, capsys, _argv(RUN_CARD, "--load", str(other), "--finetune"))
    assert f"error: --load {other} holds a checkpoint of another model" in line
    _fields_named(line, RUN_CARD, CHECKPOINT_CARD)
    pattern = get_card(RUN_CARD).hybrid_layer_pattern
    own_args = stored_args(**layout, oellm_model=RUN_CARD, num_layers=_parsed(RUN_CARD).num_layers,
                           hybrid_layer_pattern=pattern)
    own = save_dist_checkpoint(tmp_path / "own", own_args, iteration=random.randrange(1, 10**6))
    with pytest.raises(Reached):
        entry.main(_argv(RUN_CARD, "--load", str(own), "--finetune"))
    cut = 2 * random.randrange(1, len(pattern) // 2)
    resplit = _parsed(RUN_CARD, "--hybrid-layer-pattern", f"{pattern[:cut]}|{pattern[cut:]}", "--load", str(own))
    load_checks.check_checkpoint_architecture(resplit, read_loaded_checkpoint(resplit))
    foreign_args = stored_args(**layout)
    del foreign_args.oellm_model
    foreign = save_dist_checkpoint(tmp_path / "foreign", foreign_args, iteration=random.randrange(1, 10**6))
    with pytest.raises(Reached):
        entry.main(_argv(RUN_CARD, "--load", str(foreign), "--finetune"))
