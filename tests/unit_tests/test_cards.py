"""Model cards: registry, flavours, mixer patterns, validation errors."""

import dataclasses
import json
import random

import pytest

from megatron.oellm.cards import PUBLISHED_CARDS, CardError, get_card, list_card_names
from tests.unit_tests.card_helpers import PUBLISHED_CONFIGS


def test_every_listed_name_resolves_and_is_valid():
    for name in list_card_names():
        assert get_card(name).name == name


@pytest.mark.parametrize("name, attention_layers, linear_layers", [
    ("qwen3.5-35b-a3b", 10, 30), ("qwen3-30b-a3b", 48, 0), ("qwen3-235b-a22b", 94, 0), ("oellm-ckda-hybrid", 8, 40)])
def test_mixer_counts(name, attention_layers, linear_layers):
    card = get_card(name)
    assert card.num_attention_layers == attention_layers
    assert card.num_linear_layers == linear_layers


def test_qwen3_5_pattern_puts_attention_on_every_fourth_layer():
    card = get_card("qwen3.5-35b-a3b")
    assert [i for i, m in enumerate(card.mixer_types) if m == "attention"] == list(range(3, 40, 4))
    assert card.hybrid_layer_pattern.startswith("GEGEGE*EGE")
    assert len(card.hybrid_layer_pattern) == 80


def test_tiny_is_structurally_complete():
    tiny = get_card("qwen3.5-35b-a3b-tiny")
    assert tiny.mixer_types.count("gdn") >= 2 and tiny.mixer_types.count("attention") >= 1
    assert tiny.num_experts >= 8 and tiny.moe_shared_expert_intermediate_size > 0 and tiny.moe_shared_expert_gate
    assert tiny.num_query_groups < tiny.num_attention_heads and tiny.rotary_percent < 1


def test_proxy_keeps_width_and_pattern():
    base, proxy = get_card("qwen3.5-35b-a3b"), get_card("qwen3.5-35b-a3b-proxy-8L")
    assert proxy.num_layers == 8 and proxy.hidden_size == base.hidden_size and proxy.num_experts == base.num_experts
    assert proxy.mixer_types == base.mixer_types[:8]


def test_proxy_breaking_the_pattern_is_refused_with_the_fix():
    with pytest.raises(CardError, match="multiple of full_attention_interval"):
        get_card("qwen3.5-35b-a3b-proxy-6L")


def test_unknown_model_lists_known_names():
    with pytest.raises(CardError, match="qwen3-30b-a3b"):
        get_card("llama-7b")


@pytest.mark.parametrize("change, message", [
    ({"num_attention_heads": 6, "num_query_groups": 4}, "multiple of num_query_groups"),
    ({"moe_router_topk": 300}, "exceeds num_experts"),
    ({"rotary_percent": 0.0}, "rotary_percent"),
    ({"hidden_size": 0}, "hidden_size must be positive"),
    ({"linear_num_value_heads": 24, "linear_num_key_heads": 16}, "multiple of linear_num_key_heads"),
])
def test_validation_errors(change, message):
    with pytest.raises(CardError, match=message):
        dataclasses.replace(PUBLISHED_CARDS["qwen3.5-35b-a3b"], **change)


def test_with_vocab_overrides_only_the_vocabulary():
    card = get_card("qwen3-30b-a3b")
    padded = card.with_vocab(262144)
    assert padded.vocab_size == 262144 and dataclasses.replace(padded, vocab_size=card.vocab_size) == card


def _flat_hf_fields(config) -> dict:
    """A transformers config's fields, ``rope_parameters`` flattened (``rope_theta``, ``partial_rotary_factor``)."""
    fields = config.to_dict()
    fields.update(fields.pop("rope_parameters", None) or {})
    return fields


def test_qwen3_5_source_note_names_every_field_that_differs_from_the_transformers_defaults():
    """The card cites transformers' ``Qwen3_5MoeTextConfig`` defaults as agreeing with it: every field where they do
    not must be named in that note (rope_theta and max_position_embeddings are the checkpoint's, not the defaults)."""
    pytest.importorskip("transformers")
    from transformers import Qwen3_5MoeTextConfig

    from megatron.oellm.models.qwen3_5.convert import hf_config_from_card

    card = get_card("qwen3.5-35b-a3b")
    ours, defaults = _flat_hf_fields(hf_config_from_card(card)), _flat_hf_fields(Qwen3_5MoeTextConfig())
    differing = {name for name in defaults.keys() - {"architectures", "transformers_version"}
                 if ours.get(name) != defaults[name]}
    assert differing == {"rope_theta", "max_position_embeddings"}
    assert all(name in card.sources["shape"] for name in differing), card.sources["shape"]


def test_unknown_model_suggests_the_closest_name():
    """A one-character typo got the whole list but no suggestion."""
    name = random.choice(["qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3-235b-a22b-tiny"])
    typo = name[:-1] + "x"
    with pytest.raises(CardError, match=f"did you mean '{name}'"):
        get_card(typo)


@pytest.mark.parametrize("field", ["moe_shared_expert_intermediate_size", "max_position_embeddings",
                                   "linear_gate_low_rank_dim"])
def test_negative_sizes_are_refused(field):
    """A negative shared-expert width passed validation and gave a negative shared-expert parameter and FLOP count."""
    with pytest.raises(CardError, match=field):
        dataclasses.replace(get_card("qwen3.5-35b-a3b"), **{field: -random.randrange(1, 1000)})


@pytest.mark.parametrize("name", sorted(PUBLISHED_CONFIGS))
def test_published_cards_describe_the_published_checkpoints(name):
    """Each Qwen card must convert its published checkpoint (``oellm convert`` refuses a config.json whose RoPE base,
    norm epsilon or shapes differ from the card's) and set up RoPE for its context length: a card's RoPE base, norm
    epsilon or max_position_embeddings off from the release passed every other test, while training from the
    published weights would compute another model and the published checkpoint would be refused."""
    pytest.importorskip("transformers")
    from megatron.oellm.convert.hf_config import check_hf_config

    card, published = get_card(name), PUBLISHED_CONFIGS[name]
    check_hf_config(card, json.dumps(published), f"{name} config.json")
    text = published.get("text_config", published)
    assert card.max_position_embeddings == text["max_position_embeddings"]
    assert card.untie_embeddings is not published["tie_word_embeddings"]
