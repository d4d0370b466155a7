"""The OEL CKDA hybrid's active-parameter count against the MN5 report #438 ("~39B total / 2.7B active"): the card's
count follows Hugging Face (input embedding and output layer both counted, 3.28B active); the report's 2.7B is the
same count less the input embedding, which ``ParameterCounts.active_without_input_embedding`` gives and the card
documents. Numbers are recomputed here by hand from the card's fields."""

from __future__ import annotations

import dataclasses
import random

import pytest

from megatron.oellm.cards import OELLM_CKDA_HYBRID, get_card
from megatron.oellm.params import format_count, parameter_counts


def by_hand(card) -> tuple[int, int, int]:
    """(total, active, vocabulary table) of a CKDA hybrid card, term by term from its fields."""
    h, v = card.hidden_size, card.vocab_size
    q, kv = card.num_attention_heads * card.kv_channels, card.num_query_groups * card.kv_channels
    attention = h * q * 2 + 2 * h * kv + q * h + 2 * card.kv_channels  # gated q, k, v, o, QK norms
    kw = card.linear_num_key_heads * card.linear_key_head_dim
    vw = card.linear_num_value_heads * card.linear_value_head_dim
    heads, rank = card.linear_num_value_heads, card.linear_gate_low_rank_dim
    ckda = (h * (2 * kw + vw) + (2 * kw + vw) * card.linear_conv_kernel_dim + h * heads
            + h * rank + rank * heads * card.linear_key_head_dim + h * rank + rank * vw
            + 2 * heads + card.linear_value_head_dim + vw * h)
    expert = 3 * h * card.moe_ffn_hidden_size
    shared = 3 * h * card.moe_shared_expert_intermediate_size + h  # with its sigmoid gate
    layers, attention_layers = card.num_layers, card.num_layers // card.full_attention_interval
    mixers = attention_layers * attention + (layers - attention_layers) * ckda
    dense = mixers + layers * (shared + card.num_experts * h + 2 * h) + h  # + routers, layer norms, final norm
    routed = layers * card.num_experts * expert
    tables = (2 if card.untie_embeddings else 1) * v * h
    total = dense + routed + tables
    active = dense + layers * card.moe_router_topk * expert + tables
    return total, active, v * h


def test_the_hybrids_counts_by_hand_and_the_reports_two_point_seven() -> None:
    total, active, table = by_hand(OELLM_CKDA_HYBRID)
    counts = parameter_counts(OELLM_CKDA_HYBRID)
    assert (counts.total, counts.active) == (total, active) == (38_387_820_800, 3_281_496_320)
    assert counts.active_without_input_embedding == active - table == 2_744_625_408
    assert round(counts.active_without_input_embedding / 1e8) == 27  # the report's "2.7B active"
    assert round(counts.active / 1e8) != 27


@pytest.mark.parametrize("untied", [True, False])
def test_active_without_input_embedding_leaves_out_one_table_only_when_untied(untied: bool) -> None:
    """Random vocabularies and widths: an untied card loses exactly its input table, a tied one nothing (its one
    table is the output layer every token multiplies)."""
    rng = random.Random(random.random())
    for name in ("oellm-ckda-hybrid-tiny", "qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"):
        card = dataclasses.replace(get_card(name), vocab_size=rng.randint(300, 5000),
                                   hidden_size=rng.choice([32, 48, 64, 96]), untie_embeddings=untied)
        counts = parameter_counts(card)
        table = card.vocab_size * card.hidden_size
        assert counts.active_without_input_embedding == counts.active - (table if untied else 0)
        if card.linear_mixer == "ckda":
            total, active, _ = by_hand(card)
            assert (counts.total, counts.active) == (total, active)


def test_the_card_states_both_counts_it_is_printed_with() -> None:
    """The card's note quotes the numbers ``oellm models`` prints and the report's convention, as computed now."""
    counts = parameter_counts(OELLM_CKDA_HYBRID)
    note = OELLM_CKDA_HYBRID.sources["params"]
    for number in (counts.total, counts.active, counts.active_without_input_embedding):
        assert format_count(number) in note
    assert "input embedding" in note and "2.7B" in note


def test_models_command_prints_the_active_count_without_the_input_embedding(capsys):
    import argparse

    from megatron.oellm.commands import models

    assert models.run(argparse.Namespace(json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    ckda = next(line for line in lines if line.startswith("oellm-ckda-hybrid "))
    counts = parameter_counts(get_card("oellm-ckda-hybrid"))
    assert ckda.split()[-3:] == [format_count(counts.total), format_count(counts.active),
                                 format_count(counts.active - counts.breakdown["embedding"])]
    footnote = [line for line in lines if not line.startswith("note: ")][-1]  # the CKDA placeholder note follows it
    assert footnote.startswith("active* = active less the input embedding")
