"""mcore-to-hf compares the run arguments a training checkpoint stores with the card where no tensor shows them.

A run described by megatron's flags alone (no ``--oellm-model``) may train another router top-k, RoPE base, norm
epsilon, ... than the card it is exported as: every tensor shape still matches, and the export used to write the
card's ``config.json`` for it without a word, so the HF model computed otherwise than the trained one.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
from pathlib import Path

import pytest

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.convert import stored_checks, to_hf, to_mcore
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.megatron_args import flags_to_argv, model_flags
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors, write_hf

CARDS = ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"]
NO_SHAPE_FLAGS = ("rotary-base", "rotary-percent", "norm-epsilon", "apply-layernorm-1p", "moe-router-topk",
                  "moe-router-pre-softmax")
"""The card's megatron flags that change what the model computes and no tensor's name or shape, listed here rather
than taken from ``stored_checks.RUN_FLAGS_NO_SHAPE_SHOWS``: a flag dropped from that tuple must fail its case here
(``apply-layernorm-1p``: a run that trained zero-centred norms, exported as plain ones, or the other way round)."""


def _other_value(value: object) -> object:
    """A value of the same type as ``value`` that differs from it (a random one where numbers are involved)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + random.randint(1, 3)
    return value * random.choice([0.5, 2.0, 10.0])


def _run_arguments(card: ModelCard, flags: dict[str, object] | None = None) -> argparse.Namespace:
    """What a training run with the card's flags, ``flags`` (name -> value) replacing some, stores: megatron's own
    parse of them, so each flag is stored under its parser destination (``--norm-epsilon`` as
    ``layernorm_epsilon``), not under its name with ``_`` for ``-``."""
    return parse_oellm_argv(flags_to_argv(model_flags(card) | (flags or {})))


def _training_checkpoint(card: ModelCard, tmp: Path, monkeypatch: pytest.MonkeyPatch,
                         changed: dict[str, object], flags: dict[str, object] | None = None) -> dict:
    """Random HF tensors of ``card`` converted to ``tmp/mcore`` with the stored run arguments a training run with
    the card's flags would store (:func:`_run_arguments` with ``flags``), ``changed`` (dest -> value) replacing
    some; returns the HF tensors."""
    hf = random_hf_tensors(card, seed=random.randrange(2**31))
    write_hf(card, hf, tmp / "hf")
    run = vars(_run_arguments(card, flags)) | changed
    base = to_mcore.megatron_checkpoint_args
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args",
                        lambda c: argparse.Namespace(**{**run, **vars(base(c))}))
    to_mcore.hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args", base)
    return hf


def _assert_export_refused(card: ModelCard, tmp: Path, monkeypatch: pytest.MonkeyPatch, changed: dict[str, object],
                           match: str, flags: dict[str, object] | None = None) -> None:
    """mcore-to-hf of a training checkpoint of ``card`` with run arguments ``changed`` (and run flags ``flags``)
    raises ``match`` and writes nothing."""
    _training_checkpoint(card, tmp, monkeypatch, changed, flags)
    with pytest.raises(ConversionError, match=match):
        to_hf.mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize("flag", NO_SHAPE_FLAGS)
def test_a_run_argument_the_card_does_not_share_is_refused(name: str, flag: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    card = get_card(name)
    value = _other_value(model_flags(card)[flag])
    stored, own = vars(_run_arguments(card, {flag: value})), vars(_run_arguments(card))
    [dest] = [key for key in stored if stored[key] != own[key]]  # where megatron's parser stores the flag
    _assert_export_refused(card, tmp_path, monkeypatch, {}, rf"{dest}: run {value!r}, card ", {flag: value})


@pytest.mark.parametrize("name", CARDS)
def test_the_run_arguments_of_the_card_export_bit_exact(name: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    card = get_card(name)
    hf = _training_checkpoint(card, tmp_path, monkeypatch, {})
    to_hf.mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


@pytest.mark.parametrize("name", CARDS)
def test_the_arguments_megatron_parses_for_the_card_pass(name: str) -> None:
    """What a training run with ``--oellm-model`` stores (megatron's own parsing and validation of the card's
    flags) matches the card, and the same arguments are refused for a card that differs in one of them."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    run = validate_on_cluster(["--oellm-model", name, "--micro-batch-size", "1", "--global-batch-size", "1",
                               "--seq-length", "64", "--train-iters", "1", "--lr", "1e-4", "--mock-data",
                               "--tokenizer-type", "NullTokenizer"], world_size=1, env={})
    card = get_card(name)
    stored_checks.check_run_arguments(card, run)
    other = dataclasses.replace(card, moe_router_topk=card.moe_router_topk + random.randint(1, 3))
    with pytest.raises(ConversionError, match=rf"moe_router_topk: run {card.moe_router_topk}, card "):
        stored_checks.check_run_arguments(other, run)


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize("changed", [{"moe_mlp_glu_interleave_size": None},
                                     {"moe_shared_expert_glu_interleave_size": None,
                                      "use_grouped_gemm_for_shared_expert": True}])
def test_a_run_with_block_interleaved_swiglu_weights_is_refused(name: str, changed: dict, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with ``--moe-mlp-glu-interleave-size N`` (TE's grouped experts; or the shared expert's with
    ``--use-grouped-gemm-for-shared-expert``) keeps each expert's SwiGLU fc1 with gate and up rows alternating in
    blocks of N and megatron-core saves it so: every shape matches the card, and the export used to hand the Hugging
    Face model those rows as ``[gate; up]`` without a word. The shared-expert size alone changes nothing."""
    card = get_card(name)
    size = random.choice([16, 32, 64])
    changed = {k: size if v is None else v for k, v in changed.items()}
    _training_checkpoint(card, tmp_path, monkeypatch, changed)
    flag = next(k for k in changed if k.endswith("interleave_size")).replace("_", "-")
    if "shared" in flag and not card.moe_shared_expert_intermediate_size:
        to_hf.mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")  # no shared expert
        return
    with pytest.raises(ConversionError, match=rf"--{flag} {size}.*\[gate; up\]"):
        to_hf.mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    stored_checks.check_run_arguments(card, argparse.Namespace(moe_shared_expert_glu_interleave_size=size))


INEXPRESSIBLE_RUNS = [
    ({"moe_router_score_function": "sigmoid"}, "--moe-router-score-function 'sigmoid'"),
    ({"moe_router_topk_scaling_factor": 2.5}, "--moe-router-topk-scaling-factor 2.5"),
    ({"rotary_interleaved": True}, "--rotary-interleaved True"),
    ({"position_embedding_type": "none"}, "--position-embedding-type 'none'"),
]
"""Run arguments of Megatron's own training scripts that change what a Qwen model computes and no tensor's shape,
with how the refusal names them: no card describes them, so no export may name a card for them."""


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize(("changed", "named"), INEXPRESSIBLE_RUNS)
def test_a_run_with_a_flag_no_card_describes_is_refused(name: str, changed: dict, named: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint saved by ``pretrain_gpt.py`` with a sigmoid router, scaled routing weights, interleaved RoPE or
    no position embedding matches every tensor shape of a Qwen card; the export used to write the card's
    ``config.json`` for it without a word."""
    card = get_card(name)
    _assert_export_refused(card, tmp_path, monkeypatch, changed,
                           rf"trained with {re.escape(named)} \(.*card {card.name}, another model")


@pytest.mark.parametrize("name", CARDS)
def test_a_run_with_a_multi_token_prediction_head_exports(name: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``--mtp-num-layers`` adds a head the export drops (its tensors are left out and listed): the stored argument
    alone is no reason to refuse, while the training entry refuses it."""
    card = get_card(name)
    hf = _training_checkpoint(card, tmp_path, monkeypatch, {"mtp_num_layers": random.randint(1, 2)})
    to_hf.mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))
