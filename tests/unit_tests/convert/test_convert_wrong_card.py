"""The wrong ``--model`` for a checkpoint: a checkpoint of the other family (Qwen3-MoE vs Qwen3.5) is refused with
one line naming its ``model_type``, and a checkpoint of this card with another vocabulary is refused naming the
vocabulary, then converts with ``--vocab-size``; any other contradiction still asks for the right card."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.hf_config import check_hf_config
from megatron.oellm.convert.mcore_checkpoint import CARD_KEY, HF_CONFIG_KEY, card_record
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.stored_checks import check_stored_card
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, edit_json, random_hf_tensors, write_hf

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"
MODEL_TYPE = {QWEN3: "qwen3_moe", QWEN35: "qwen3_5_moe_text"}
OTHER = {QWEN3: QWEN35, QWEN35: QWEN3}
FITS = {QWEN3: "qwen3-30b-a3b-tiny or qwen3-235b-a22b-tiny", QWEN35: QWEN35}
"""The catalogue's cards a tiny card's config describes (the two Qwen3 MoE tiny cards are the same model)."""


def _config_text(name: str) -> str:
    """The ``config.json`` text transformers writes for card ``name``."""
    card = get_card(name)
    return family_module(card).hf_config_from_card(card).to_json_string()


def _refusal(checkpoint: str, where: str, fix: str | None = None) -> str:
    """The exact refusal of a ``config.json`` of card ``checkpoint`` (from ``where``) under the other family's card:
    by default it names the cards that fit it."""
    fix = fix or f"pick the card of this checkpoint with --model ({FITS[checkpoint]} fits it)"
    return (f"{where} does not describe card {OTHER[checkpoint]}: model_type: checkpoint {MODEL_TYPE[checkpoint]!r}, "
            f"card {MODEL_TYPE[OTHER[checkpoint]]!r}; {fix}")


@pytest.mark.parametrize("checkpoint", [QWEN3, QWEN35])
def test_hf_checkpoint_of_the_other_family_is_refused_by_its_model_type(tmp_path: Path, checkpoint: str) -> None:
    """Each card's config class lacks a field the other family states (Qwen3MoeConfig has no
    ``shared_expert_intermediate_size``, Qwen3_5MoeTextConfig no ``norm_topk_prob``): the model type is compared
    first, so the refusal names the family and is not an AttributeError."""
    card = get_card(checkpoint)
    write_hf(card, random_hf_tensors(card, seed=11), tmp_path / "hf")
    where = str(tmp_path / "hf" / "config.json")
    with pytest.raises(ConversionError) as raised:
        hf_to_mcore_checkpoint(get_card(OTHER[checkpoint]), tmp_path / "hf", tmp_path / "mcore")
    assert str(raised.value) == _refusal(checkpoint, where)
    assert not (tmp_path / "mcore").exists()


def test_multimodal_config_of_the_other_family_is_refused_by_its_model_type() -> None:
    """The published Qwen3.5 nests the language model under ``text_config``; its model type is the one compared."""
    text = json.dumps({"model_type": "qwen3_5_moe", "text_config": json.loads(_config_text(QWEN35))})
    with pytest.raises(ConversionError) as raised:
        check_hf_config(get_card(QWEN3), text, "config.json")
    assert str(raised.value) == _refusal(QWEN35, "config.json")


@pytest.mark.parametrize(("checkpoint", "field"), [(QWEN35, "shared_expert_intermediate_size"),
                                                   (QWEN3, "norm_topk_prob")])
def test_field_the_cards_config_class_lacks_is_a_contradiction(checkpoint: str, field: str) -> None:
    """Without ``model_type`` the other family's config is still refused: a field the card's config class does not
    have is reported as a mismatch (not an AttributeError)."""
    config = json.loads(_config_text(checkpoint))
    del config["model_type"]
    card = get_card(OTHER[checkpoint])
    class_name = type(family_module(card).hf_config_from_card(card)).__name__
    with pytest.raises(ConversionError, match=rf"^config\.json does not describe card {card.name}: .*{field}: "
                                              rf"checkpoint {config[field]!r}, card's {class_name} has no such field"):
        check_hf_config(card, json.dumps(config), "config.json")


@pytest.mark.parametrize("checkpoint", [QWEN3, QWEN35])
def test_hf_config_option_of_the_other_family_is_refused(tmp_path: Path, checkpoint: str) -> None:
    """``mcore-to-hf --hf-config`` with the other family's model directory: the fix names ``--hf-config`` first (the
    checkpoint's card is right; the config given beside it is another model's)."""
    card = get_card(OTHER[checkpoint])
    write_hf(card, random_hf_tensors(card, seed=12), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(_config_text(checkpoint))
    with pytest.raises(ConversionError) as raised:
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out", hf_config_dir=tmp_path / "other")
    assert str(raised.value) == _refusal(checkpoint, str(tmp_path / "other" / "config.json"),
                                         "give --hf-config the directory of this checkpoint's own HF model")
    assert not (tmp_path / "out").exists()


def test_stored_config_of_the_other_family_is_refused(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint that carries the other family's config.json (e.g. edited by hand) is refused the same way."""
    card, _, tmp = converted
    common = CheckpointReader(tmp / "mcore" / "release").common_state()
    stored = {**common, HF_CONFIG_KEY: {"config.json": _config_text(QWEN35)}}
    monkeypatch.setattr(CheckpointReader, "common_state", lambda reader: stored)
    with pytest.raises(ConversionError) as raised:
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert str(raised.value) == _refusal(QWEN35, f"the config.json stored with {tmp / 'mcore' / 'release'}")


def test_wrong_family_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """What the user runs: no traceback, the refusal as the last line of stderr, nothing on stdout, status 2."""
    card = get_card(QWEN35)
    write_hf(card, random_hf_tensors(card, seed=13), tmp_path / "hf")
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "convert", "hf-to-mcore", "--model", QWEN3,
                           "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mcore")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        f"oellm convert hf-to-mcore: error: {_refusal(QWEN35, str(tmp_path / 'hf' / 'config.json'))}")
    assert "Traceback" not in done.stderr


def test_stored_card_of_another_vocabulary_names_the_vocabulary_once() -> None:
    """The card's name is no structural field: a checkpoint of ``card.with_vocab(N)`` keeps it, so the message
    must not read "written for card 'X', not X"."""
    card = get_card(QWEN3)
    with pytest.raises(ConversionError) as raised:
        check_stored_card(card, {CARD_KEY: card_record(card.with_vocab(1024))})
    assert str(raised.value) == (f"the checkpoint's vocab_size 1024 differs from this conversion's {card.vocab_size} "
                                 f"(card {QWEN3}'s, or --vocab-size where given); pass --vocab-size 1024 for the "
                                 "vocabulary it was written with")
    deeper = card_record(card.with_vocab(1024).with_layers(card.num_layers + 1, name=card.name))
    with pytest.raises(ConversionError) as raised:
        check_stored_card(card, {CARD_KEY: deeper})
    assert str(raised.value) == (f"the checkpoint was written for another version of card {QWEN3}: num_layers: "
                                 f"checkpoint {card.num_layers + 1}, card {card.num_layers}; vocab_size: checkpoint "
                                 f"1024, card {card.vocab_size}")
    with pytest.raises(ConversionError, match=rf"^checkpoint was written for card '{QWEN35}', not {QWEN3}: family"):
        check_stored_card(card, {CARD_KEY: card_record(get_card(QWEN35))})
    check_stored_card(card, {CARD_KEY: card_record(card)})
    check_stored_card(card, {})


def test_vocab_size_option_converts_a_checkpoint_of_another_vocabulary(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """Both directions take ``--vocab-size``: an HF model with 1024 tokens goes to megatron and back bit for bit
    under the 512-token card; without the option the way back is refused naming the option."""
    card = get_card(QWEN3).with_vocab(1024)
    hf = random_hf_tensors(card, seed=14)
    write_hf(card, hf, tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", eos_token_id=7)
    assert main(["convert", "hf-to-mcore", "--model", QWEN3, "--hf", str(tmp_path / "hf"), "--out",
                 str(tmp_path / "mcore"), "--vocab-size", "1024"]) == 0
    assert capsys.readouterr().out.startswith(f"oellm convert hf-to-mcore: {QWEN3} with vocabulary 1024: read ")
    assert main(["convert", "mcore-to-hf", "--model", QWEN3, "--mcore", str(tmp_path / "mcore"), "--out",
                 str(tmp_path / "refused")]) == 2
    assert capsys.readouterr().err == (f"oellm convert mcore-to-hf: error: the checkpoint's vocab_size 1024 differs "
                                       f"from this conversion's 512 (card {QWEN3}'s, or --vocab-size where given); "
                                       "pass --vocab-size 1024 for the vocabulary it was written with\n")
    assert not (tmp_path / "refused").exists()
    # a --vocab-size of the user's that is wrong is named as the conversion's, not as the card's (which is 512)
    wrong = random.choice([256, 2048])
    assert main(["convert", "mcore-to-hf", "--model", QWEN3, "--mcore", str(tmp_path / "mcore"), "--out",
                 str(tmp_path / "refused"), "--vocab-size", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert f"differs from this conversion's {wrong} (card {QWEN3}'s, or --vocab-size where given)" in err, err
    assert f"card {QWEN3}'s {wrong}" not in err and "pass --vocab-size 1024" in err
    assert main(["convert", "mcore-to-hf", "--model", QWEN3, "--mcore", str(tmp_path / "mcore"), "--out",
                 str(tmp_path / "out"), "--vocab-size", "1024"]) == 0
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eos_token_id"] == 7


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "tensor-shapes"])
def test_an_hf_model_of_another_vocabulary_is_pointed_to_vocab_size(tmp_path: Path, with_config: bool) -> None:
    """An HF model with an extended vocabulary fits no other card; the refusal names the ``--vocab-size`` that
    converts it (from its config, else from the embedding rows), and that vocabulary converts bit for bit."""
    card = get_card(QWEN3)
    vocab = card.vocab_size + random.randrange(1, 1000)
    hf = random_hf_tensors(card.with_vocab(vocab), seed=random.randrange(2**31))
    write_hf(card.with_vocab(vocab), hf, tmp_path / "hf")
    if not with_config:
        (tmp_path / "hf" / "config.json").unlink()
    with pytest.raises(ConversionError) as raised:
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert f"pass --vocab-size {vocab} " in str(raised.value)
    assert "--model" not in str(raised.value)
    hf_to_mcore_checkpoint(card.with_vocab(vocab), tmp_path / "hf", tmp_path / "mcore")
    mcore_to_hf_checkpoint(card.with_vocab(vocab), tmp_path / "mcore", tmp_path / "back")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "back")))


def test_a_config_of_another_shape_still_points_to_the_card() -> None:
    """Other contradictions (here with the vocabulary) still ask for the right card, and say that none fits."""
    card = get_card(QWEN3)
    config = family_module(card).hf_config_from_card(card.with_vocab(card.vocab_size + 64)).to_dict()
    config["num_experts_per_tok"] = card.moe_router_topk + 1
    with pytest.raises(ConversionError, match=r"pick the card of this checkpoint with --model: no card of "
                                              r"megatron-oellm fits it"):
        check_hf_config(card, json.dumps(config), "config.json")


@pytest.mark.parametrize("value", ["0", "-5", "1e3", "many"])
def test_vocab_size_option_must_be_a_positive_integer(capsys: pytest.CaptureFixture, value: str) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["convert", "mcore-to-hf", "--model", QWEN3, "--mcore", "m", "--out", "o", "--vocab-size", value])
    assert raised.value.code == 2
    assert f"argument --vocab-size: expected a positive integer, got {value!r}" in capsys.readouterr().err
