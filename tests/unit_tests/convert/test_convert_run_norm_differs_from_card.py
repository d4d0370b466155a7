"""mcore-to-hf of a training checkpoint whose run trained another norm epsilon or zero-centring than the card.

megatron-core 0.19.2's parser stores ``--norm-epsilon`` as ``layernorm_epsilon`` and ``--apply-layernorm-1p`` as
``layernorm_zero_centered_gamma``; the export looked for ``norm_epsilon`` / ``apply_layernorm_1p``, found neither and
wrote the card's ``config.json`` for a model that computes otherwise, without a word. The stored arguments here are
megatron's own parse of the run's flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.convert import stored_checks, to_hf, to_mcore
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.megatron_args import flags_to_argv, model_flags
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors, write_hf

CARDS = ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]
STORED_AS = {"norm_epsilon": "layernorm_epsilon", "zero_centered_norm": "layernorm_zero_centered_gamma"}
"""Card field -> the name megatron-core 0.19.2's parser stores its flag under."""


def _trained_as(card: ModelCard, field: str) -> ModelCard:
    """``card`` with a fresh other norm epsilon, or the other zero-centring: the model a run trained."""
    if field == "zero_centered_norm":
        return dataclasses.replace(card, zero_centered_norm=not card.zero_centered_norm)
    return dataclasses.replace(card, norm_epsilon=card.norm_epsilon * random.choice([0.1, 0.5, 2.0, 10.0]))


def _run_args(card: ModelCard) -> argparse.Namespace:
    """What a run of megatron's flags for ``card`` (no ``--oellm-model``) stores: megatron's parse of them."""
    return parse_oellm_argv(flags_to_argv(model_flags(card)))


def _training_checkpoint(card: ModelCard, run: argparse.Namespace, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Fresh random HF tensors of ``card`` converted to ``tmp/mcore`` with ``run`` as its stored run arguments;
    returns the HF tensors."""
    hf = random_hf_tensors(card, seed=random.randrange(2**31))
    write_hf(card, hf, tmp / "hf")
    base = to_mcore.megatron_checkpoint_args
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args",
                        lambda c: argparse.Namespace(**{**vars(run), **vars(base(c))}))
    to_mcore.hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args", base)
    return hf


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize("field", list(STORED_AS))
def test_a_run_of_another_norm_is_refused(name: str, field: str) -> None:
    """The stored argument is named with the run's and the card's value."""
    card = get_card(name)
    trained = _trained_as(card, field)
    with pytest.raises(ConversionError, match=rf"{STORED_AS[field]}: run {getattr(trained, field)!r}, card "):
        stored_checks.check_run_arguments(card, _run_args(trained))


@pytest.mark.parametrize("name", CARDS)
def test_the_export_of_a_run_of_another_norm_writes_nothing(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """mcore-to-hf refuses before writing; the same checkpoint with the card's own run arguments exports bit-exact."""
    card = get_card(name)
    trained = _trained_as(card, random.choice(list(STORED_AS)))
    _training_checkpoint(card, _run_args(trained), tmp_path / "other", monkeypatch)
    with pytest.raises(ConversionError, match="differ from card .* where no tensor shape shows it"):
        to_hf.mcore_to_hf_checkpoint(card, tmp_path / "other" / "mcore", tmp_path / "other" / "out")
    assert not (tmp_path / "other" / "out").exists()
    hf = _training_checkpoint(card, _run_args(card), tmp_path / "own", monkeypatch)
    to_hf.mcore_to_hf_checkpoint(card, tmp_path / "own" / "mcore", tmp_path / "own" / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "own" / "out")))
