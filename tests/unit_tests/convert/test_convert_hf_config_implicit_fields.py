"""HF ``config.json`` fields a checkpoint leaves implicit are compared with the card as transformers reads them:
values transformers derives from other fields (layer types, head size), class defaults that differ from the card
(Qwen3-MoE's ``norm_topk_prob``), and the top-level fields of a multimodal config."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.hf_config import check_hf_config, text_model_config
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"


def _card_config(name: str) -> dict:
    """The ``config.json`` fields transformers writes for card ``name``."""
    card = get_card(name)
    return json.loads(family_module(card).hf_config_from_card(card).to_json_string())


def _check(name: str, config: dict) -> None:
    check_hf_config(get_card(name), json.dumps(config), "config.json")


def test_layer_types_derived_from_a_stated_full_attention_interval_are_compared() -> None:
    """Without ``layer_types`` transformers derives them from ``full_attention_interval``: an interval of 2 makes
    layer 1 an attention layer, which the card's ``GGG*`` pattern does not have."""
    config = _card_config(QWEN35)
    del config["layer_types"]
    config["full_attention_interval"] = 2
    with pytest.raises(ConversionError, match=r"layer_types: checkpoint \['linear_attention', 'full_attention'"):
        _check(QWEN35, config)


def test_layer_types_derived_as_the_card_has_them_are_accepted() -> None:
    config = _card_config(QWEN35)
    del config["layer_types"]
    config["full_attention_interval"] = 4
    _check(QWEN35, config)


def test_head_dim_derived_from_the_stated_width_is_compared() -> None:
    """Qwen3-MoE's attention uses ``hidden_size // num_attention_heads`` (16 here) without ``head_dim``; the card's
    heads are 32 wide."""
    config = _card_config(QWEN3)
    del config["head_dim"]
    with pytest.raises(ConversionError, match=r"head_dim: checkpoint 16, card 32"):
        _check(QWEN3, config)


def test_head_dim_stated_as_the_card_has_it_is_accepted() -> None:
    _check(QWEN3, _card_config(QWEN3))


def test_a_null_head_dim_is_compared_as_given() -> None:
    """``"head_dim": null`` is no missing field: Qwen3-MoE's attention takes the ``None`` as its head size and cannot
    be built, so it is refused as stated, not replaced by ``hidden_size // num_attention_heads``."""
    config = _card_config(QWEN3)
    config["head_dim"] = None
    with pytest.raises(ConversionError, match=r"head_dim: checkpoint None, card 32"):
        _check(QWEN3, config)


def test_top_level_tie_word_embeddings_of_a_multimodal_config_is_compared() -> None:
    """The export's text config takes ``tie_word_embeddings`` from the multimodal top level when ``text_config``
    lacks it; tied, transformers would drop the converted ``lm_head`` for the embedding."""
    text = _card_config(QWEN35)
    del text["tie_word_embeddings"]
    config = {"model_type": "qwen3_5_moe", "tie_word_embeddings": True, "text_config": text}
    assert json.loads(text_model_config(get_card(QWEN35), json.dumps(config)))["tie_word_embeddings"] is True
    with pytest.raises(ConversionError, match=r"tie_word_embeddings: checkpoint True, card False"):
        _check(QWEN35, config)


def test_text_config_field_wins_over_the_top_level_one() -> None:
    text = _card_config(QWEN35)
    config = {"model_type": "qwen3_5_moe", "tie_word_embeddings": True, "text_config": text}
    assert json.loads(text_model_config(get_card(QWEN35), json.dumps(config)))["tie_word_embeddings"] is False
    _check(QWEN35, config)


def test_a_config_leaving_out_norm_topk_prob_is_read_as_transformers_reads_it(tmp_path: Path) -> None:
    """Without ``norm_topk_prob`` transformers' Qwen3-MoE does not renormalise the top-k weights (class default
    False) while the card does: the HF model and the card compute different routings, so the config is refused."""
    card = get_card(QWEN3)
    assert not card.moe_router_pre_softmax  # the card renormalises over the chosen experts
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    config = tmp_path / "hf" / "config.json"
    data = json.loads(config.read_text())
    assert data.pop("norm_topk_prob") is True
    config.write_text(json.dumps(data))
    with pytest.raises(ConversionError, match=r"norm_topk_prob: checkpoint False, card True"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()


@pytest.mark.parametrize(("name", "field"), [(QWEN35, "shared_expert_intermediate_size"),
                                             (QWEN35, "linear_num_value_heads"), (QWEN3, "moe_intermediate_size"),
                                             (QWEN3, "num_key_value_heads")])
def test_a_shape_field_left_out_is_read_as_transformers_reads_it(tmp_path: Path, name: str, field: str) -> None:
    """A config that leaves out a shape field gets its config class's default (Qwen3.5's shared expert 512 wide,
    Qwen3-MoE's experts 768 wide), which the tensors do not have: kept with the checkpoint and written back by
    mcore-to-hf, it made an export that ``from_pretrained`` refuses on every such tensor. Refused up front instead."""
    card = get_card(name)
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    config = tmp_path / "hf" / "config.json"
    data = json.loads(config.read_text())
    stated = data.pop(field)
    config.write_text(json.dumps(data))
    default = getattr(type(family_module(card).hf_config_from_card(card))(), field)
    assert default != stated
    with pytest.raises(ConversionError, match=rf"{field}: checkpoint {default}, card {stated} \(not stated"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()
