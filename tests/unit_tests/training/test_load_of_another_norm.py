"""A megatron-oellm checkpoint whose run trained another norm epsilon or zero-centring than the run's card: megatron's
parser stores ``--norm-epsilon`` and ``--apply-layernorm-1p`` under other names than the flags'
(``layernorm_epsilon``, ``layernorm_zero_centered_gamma`` in megatron-core 0.19.2), and no tensor shape shows them.
The entry's architecture check compared a name the stored arguments never hold, so the checkpoint loaded into a model
that computes otherwise without a word. The stored arguments here come from megatron's own parser."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.megatron_args import flags_to_argv, model_flags
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.load_checks import check_checkpoint_architecture
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import (
    FINETUNE_CARD,
    checkpoint_with_args,
    entry_args,
    finetune_argv,
    save_dist_checkpoint,
)
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

CARDS = ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]


def _norm_variant(card: ModelCard, field: str) -> ModelCard:
    """``card`` with a fresh other norm epsilon, or the other zero-centring."""
    if field == "zero_centered_norm":
        return dataclasses.replace(card, zero_centered_norm=not card.zero_centered_norm)
    return dataclasses.replace(card, norm_epsilon=card.norm_epsilon * random.choice([0.1, 0.5, 2.0, 10.0]))


def _saved_by(card: ModelCard, name: str, folder: Path) -> Path:
    """A checkpoint whose stored arguments are megatron's parse of ``card``'s flags, saved under card ``name`` (an
    earlier version of the card)."""
    stored = parse_oellm_argv([*flags_to_argv(model_flags(card)), "--oellm-model", name])
    return save_dist_checkpoint(folder, stored, iteration=random.randrange(1, 10**6))


def _argv(card: str, *flags: str) -> list[str]:
    """A mock-data run of ``card`` on the torch backend with ``flags``."""
    return ["--oellm-model", card, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--ckpt-format", "torch_dist", "--mock-data",
            "--seq-length", "64", "--dist-ckpt-strictness", "log_unexpected", *flags]


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize("field", ["norm_epsilon", "zero_centered_norm"])
def test_a_checkpoint_of_another_norm_is_refused(name: str, field: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Refused naming the stored argument with both values, saying that megatron would load it silently (no shape
    differs) and, as it was saved with the same card, that its run's own flags resume it; a checkpoint of the card's
    own norm goes on."""
    card = get_card(name)
    other = _norm_variant(card, field)
    entry = entry_up_to_pretrain(monkeypatch)
    checkpoint = _saved_by(other, name, tmp_path / "other")
    line = refused_line(entry, capsys, _argv(name, "--load", str(checkpoint), "--finetune"))
    assert f"error: --load {checkpoint} was trained with other values of --oellm-model {name}'s flags (" in line
    assert line.endswith("no tensor shape shows them, so megatron-core would load it without an error and train "
                         "another model than the one saved; resume it without --oellm-model, with the megatron flags "
                         f"its run stored, or name a checkpoint of {name}")
    dest = {"norm_epsilon": "layernorm_epsilon", "zero_centered_norm": "layernorm_zero_centered_gamma"}[field]
    assert f"{dest}: checkpoint {getattr(other, field)!r}, run {getattr(card, field)!r}" in line
    own = _saved_by(card, name, tmp_path / "own")
    with pytest.raises(Reached):
        entry.main(_argv(name, "--load", str(own), "--finetune"))


def test_use_checkpoint_args_refuses_a_norm_only_difference_as_shapeless_and_a_shape_beside_it_as_taken(
        tmp_path: Path) -> None:
    """Under ``--use-checkpoint-args``: a checkpoint of the card's name that differs in a norm flag only is refused
    as one no tensor shape tells apart (megatron-core 0.19.2 restores neither norm setting, so nothing is taken from
    it); one that differs in the norm flag and in ``hidden_size`` too is refused as the run taking architecture
    arguments from the checkpoint, naming both fields."""
    card = get_card(FINETUNE_CARD)
    epsilon = card.norm_epsilon * random.choice([0.1, 0.5, 2.0, 10.0])
    hidden = card.hidden_size + 64 * random.randint(1, 8)
    norm_only = checkpoint_with_args(tmp_path / "norm", layernorm_epsilon=epsilon)
    run = entry_args(finetune_argv(norm_only))
    with pytest.raises(ValueError, match=r"was trained with other values of .*layernorm_epsilon: checkpoint .*"
                                         r"does not restore the norm settings"):
        check_checkpoint_architecture(run, read_loaded_checkpoint(run))
    both = checkpoint_with_args(tmp_path / "both", layernorm_epsilon=epsilon, hidden_size=hidden)
    run = entry_args(finetune_argv(both))
    with pytest.raises(ValueError) as refused:
        check_checkpoint_architecture(run, read_loaded_checkpoint(run))
    message = str(refused.value)
    assert message.startswith(f"--use-checkpoint-args would take architecture arguments from --load {both} that "
                              f"differ from --oellm-model {FINETUNE_CARD}'s"), message
    assert f"hidden_size: checkpoint {hidden}, card {card.hidden_size}" in message
    assert f"layernorm_epsilon: checkpoint {epsilon!r}" in message
