"""Qwen3-MoE's converter module (``megatron/oellm/models/qwen3_moe/convert.py``) against transformers' own
``Qwen3MoeForCausalLM``: the exported config states the card's values the HF model reads even where they equal
transformers' defaults on the published cards, and the in-memory API writes the expert layout the caller asks for,
as transformers holds it in memory (``fused_experts=True``) and as its ``save_pretrained`` writes it (the default)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from megatron.oellm.cards import get_card
from megatron.oellm.models.qwen3_moe import convert
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal

transformers = pytest.importorskip("transformers")


def _card(**fields: object):
    """The tiny Qwen3-MoE card with ``fields`` replaced."""
    return dataclasses.replace(get_card("qwen3-30b-a3b-tiny"), **fields)


def _hf_model(card) -> object:
    """transformers' model of ``card``'s exported config, freshly (randomly) initialised."""
    torch.manual_seed(random.randrange(2**31))
    return transformers.Qwen3MoeForCausalLM(convert.hf_config_from_card(card)).eval()


def test_the_exported_config_states_the_cards_context_length() -> None:
    """The published Qwen3-MoE cards train 40,960 positions, transformers' default is 32,768: a config that left the
    card's ``max_position_embeddings`` out would tell HF generation a shorter context than the model was trained on."""
    length = random.choice([2048, 4096, 40960, 65536])
    assert length != transformers.Qwen3MoeConfig().max_position_embeddings
    config = convert.hf_config_from_card(_card(max_position_embeddings=length))
    assert config.max_position_embeddings == length
    published = get_card("qwen3-30b-a3b")
    assert convert.hf_config_from_card(published).max_position_embeddings == published.max_position_embeddings


def test_the_hf_model_weighs_its_router_loss_by_the_cards_coefficient() -> None:
    """Fine-tuning the exported model in transformers adds ``coefficient * aux_loss`` to the language-model loss; the
    coefficient must be the card's (the published cards' 1e-3 is also transformers' default, so a config that left
    it out would only show on another card). Checked on the HF model's own loss, fresh random weights and tokens."""
    coefficient = random.choice([3e-3, 1e-2, 0.05])
    card = _card(moe_aux_loss_coeff=coefficient)
    model = _hf_model(card)
    tokens = torch.randint(0, card.vocab_size, (2, 12))
    with torch.no_grad():
        plain = model(tokens, labels=tokens)
        with_router = model(tokens, labels=tokens, output_router_logits=True)
    assert with_router.aux_loss > 0
    torch.testing.assert_close(with_router.loss - plain.loss, coefficient * with_router.aux_loss)


def test_fused_experts_give_the_hf_models_own_tensors(tmp_path: Path) -> None:
    """Megatron tensors of an HF model, mapped back with ``fused_experts=True``, are exactly that model's state dict
    (``experts.gate_up_proj`` / ``down_proj``, what ``load_state_dict`` takes); by default they are exactly what the
    model's ``save_pretrained`` writes (one ``gate_proj`` / ``up_proj`` / ``down_proj`` per expert), bit for bit."""
    card = get_card("qwen3-30b-a3b-tiny")
    model = _hf_model(card)
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    mcore = convert.hf_to_mcore(card, state)
    assert_bitwise_equal(state, convert.mcore_to_hf(card, mcore, fused_experts=True))
    model.save_pretrained(tmp_path)
    assert_bitwise_equal(load_file(tmp_path / "model.safetensors"), convert.mcore_to_hf(card, mcore))
