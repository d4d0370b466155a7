"""The HF config each converter exports (``hf_config_from_card``) states the card's values of the fields transformers
reads, for both families, on values other than transformers' defaults: the published cards' router loss coefficient
(1e-3) and norm epsilon (1e-6) equal those defaults, so a config that left a field out would only be wrong for
another card (one read back from ``--moe-aux-loss-coeff`` / ``--norm-epsilon`` flags, say)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models.qwen3_5 import convert as qwen3_5_convert
from megatron.oellm.models.qwen3_moe import convert as qwen3_moe_convert

pytest.importorskip("transformers")

CONVERTERS = {"qwen3.5-35b-a3b-tiny": qwen3_5_convert, "qwen3-30b-a3b-tiny": qwen3_moe_convert}
"""Tiny card of each family -> its converter module."""


def _drawn_values() -> dict[str, float | int]:
    """Card field -> a fresh value none of the published cards or transformers' defaults has."""
    return {"moe_aux_loss_coeff": random.choice([3e-3, 1e-2, 0.05]) * random.uniform(0.5, 2.0),
            "norm_epsilon": random.choice([1e-5, 1e-8]) * random.uniform(1.0, 9.0),
            "max_position_embeddings": random.choice([2048, 8192, 65536]) + random.randrange(1, 64) * 128,
            "rotary_base": random.choice([10_000.0, 5e5, 2e6]) * random.uniform(1.0, 3.0)}


def _hf_values(config: object) -> dict[str, float | int]:
    """The same fields as transformers' config holds them."""
    return {"moe_aux_loss_coeff": config.router_aux_loss_coef, "norm_epsilon": config.rms_norm_eps,
            "max_position_embeddings": config.max_position_embeddings,
            "rotary_base": config.rope_parameters["rope_theta"]}


@pytest.mark.parametrize("name", sorted(CONVERTERS))
def test_the_exported_config_states_the_cards_values(name: str) -> None:
    values = _drawn_values()
    card = dataclasses.replace(get_card(name), **values)
    assert _hf_values(CONVERTERS[name].hf_config_from_card(card)) == values
