"""The transformers config ``mcore-to-hf`` writes for a Qwen3-MoE card (``hf_config_from_card``) makes the HF model
compute what megatron trained: these tests fail on an inverted ``norm_topk_prob`` or a fixed ``rms_norm_eps``, which
pass every other test (their checkpoints take their config.json from the same function)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.models.qwen3_moe.convert import hf_config_from_card
from tests.unit_tests.models.hf_reference import router_records

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("pre_softmax", [False, True])
def test_the_hf_model_of_the_cards_config_routes_as_megatron(pre_softmax):
    """megatron's ``moe_router_pre_softmax=False`` takes the top-k logits and a softmax over those k (the Qwen routers'
    softmax, top-k, renormalise); ``True`` a softmax over every expert, then the top-k scores as they are. The HF
    router built from our config must give the same weights, fresh random weights and tokens."""
    card = dataclasses.replace(get_card("qwen3-30b-a3b-tiny"), moe_router_pre_softmax=pre_softmax)
    torch.manual_seed(random.randrange(2**31))
    model = transformers.Qwen3MoeForCausalLM(hf_config_from_card(card)).eval()
    with router_records(model, lambda _module, output: (output[0], output[1])) as records, torch.no_grad():
        model(torch.randint(0, card.vocab_size, (2, 16)))
    assert len(records) == card.num_layers
    for logits, scores in records:
        logits = logits.float()
        if pre_softmax:
            expected = torch.softmax(logits, dim=-1).topk(card.moe_router_topk, dim=-1).values
        else:
            expected = torch.softmax(logits.topk(card.moe_router_topk, dim=-1).values, dim=-1)
        torch.testing.assert_close(scores.float().sort(dim=-1).values, expected.sort(dim=-1).values)


def test_the_config_states_the_cards_norm_epsilon():
    card = dataclasses.replace(get_card("qwen3-30b-a3b-tiny"), norm_epsilon=random.choice([1e-5, 3e-6, 1e-8]))
    assert hf_config_from_card(card).rms_norm_eps == card.norm_epsilon
