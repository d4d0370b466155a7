"""A text model's ``config.json`` must say which model it is, as transformers reads it: ``model_type`` stated (it is
written back verbatim, and ``from_pretrained`` cannot load an export without it) and ``architectures``, where
stated, naming the card's causal-LM class (not, say, ``LlamaForCausalLM``). Both used to be accepted and written
back. A multimodal config is not held to this: its export states the card's own."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.hf_config import check_hf_config
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import edit_json, random_hf_tensors, write_hf

CARDS = ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]
OTHER_CLASSES = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2MoeForCausalLM"]
"""Causal-LM classes of other models a mislabelled config may name."""


def _card_config(name: str) -> tuple[dict, str, list[str]]:
    """(the card's config.json fields, its model_type, its architectures)."""
    card = get_card(name)
    expected = family_module(card).hf_config_from_card(card)
    return json.loads(expected.to_json_string()), expected.model_type, list(expected.architectures)


def _remedy(model_type: str, architectures: list[str]) -> str:
    return (f"state \"model_type\": {json.dumps(model_type)} and \"architectures\": {json.dumps(architectures)} in "
            "it, as the card's config does (transformers picks the model class by them)")


@pytest.mark.parametrize("name", CARDS)
def test_a_config_without_model_type_is_refused(name: str) -> None:
    config, model_type, architectures = _card_config(name)
    del config["model_type"]
    with pytest.raises(ConversionError) as raised:
        check_hf_config(get_card(name), json.dumps(config), "hf/config.json")
    assert str(raised.value) == (f"hf/config.json does not describe card {name}: model_type: not stated (transformers "
                                 f"needs it), card {model_type!r}; {_remedy(model_type, architectures)}")


@pytest.mark.parametrize("name", CARDS)
def test_architectures_naming_another_model_are_refused(name: str) -> None:
    config, model_type, architectures = _card_config(name)
    config["architectures"] = [random.choice(OTHER_CLASSES)]
    with pytest.raises(ConversionError) as raised:
        check_hf_config(get_card(name), json.dumps(config), "hf/config.json")
    assert str(raised.value) == (f"hf/config.json does not describe card {name}: architectures: checkpoint "
                                 f"{config['architectures']!r}, card {architectures!r}; "
                                 f"{_remedy(model_type, architectures)}")


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize("architectures", ["card's", None, "left out"])
def test_the_cards_class_or_none_is_accepted(name: str, architectures: str | None) -> None:
    config, _, card_architectures = _card_config(name)
    if architectures == "left out":
        del config["architectures"]
    else:
        config["architectures"] = card_architectures if architectures else None
    check_hf_config(get_card(name), json.dumps(config), "hf/config.json")


def test_a_multimodal_config_keeps_its_own_classes() -> None:
    """The published Qwen3.5 names its multimodal class at the top level, and its ``text_config`` no model type."""
    config, _, _ = _card_config("qwen3.5-35b-a3b-tiny")
    del config["model_type"], config["architectures"]
    multimodal = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                  "text_config": config}
    check_hf_config(get_card("qwen3.5-35b-a3b-tiny"), json.dumps(multimodal), "hf/config.json")


@pytest.mark.parametrize("field", ["model_type", "architectures"])
def test_both_directions_refuse_before_writing(tmp_path: Path, field: str) -> None:
    card = get_card(random.choice(CARDS))
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    edit_json(tmp_path / "hf" / "config.json", **{field: None if field == "model_type" else ["LlamaForCausalLM"]})
    with pytest.raises(ConversionError, match=rf"^{tmp_path / 'hf' / 'config.json'} does not describe .*{field}: "):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "out")
    with pytest.raises(ConversionError, match=rf"^{tmp_path / 'hf' / 'config.json'} does not describe .*{field}: "):
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out", hf_config_dir=tmp_path / "hf")
    assert not (tmp_path / "out").exists()
