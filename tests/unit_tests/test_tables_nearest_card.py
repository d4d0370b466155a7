"""``oellm table``'s model cell of a run whose arguments match no registry card names the nearest card and the
fields that differ, where they are few: a report-style run built without ``--group-query-attention`` (the MN5
Qwen3-30B-A3B runs) read ``unregistered model`` with nothing saying which flag set it apart. Generated logs, fresh
random sizes."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cards import PUBLISHED_CARDS, get_card
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from megatron.oellm.scaling_table.formats import format_markdown
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

RECIPES = {"qwen3-30b-a3b": ("qwen3_30b_a3b_mn5", 1), "qwen3.5-35b-a3b": ("qwen3_5_35b_a3b_mn5_strong", 2)}
"""A registry card -> (recipe, row) whose arguments build it."""


def _row(card: str, overrides: dict):
    """The row of a log of ``card``'s recipe row, without ``--oellm-model`` (the model read from Megatron's flags),
    with ``overrides``."""
    stem, number = RECIPES[card]
    args = {key: value for key, value in megatron_args(stem, number).items() if not key.startswith("oellm_")}
    times = [round(random.uniform(15000.0, 20000.0), 1) for _ in range(10)]
    text = megatron_log({**args, **overrides}, times, [round(random.uniform(100.0, 200.0), 1)] * 10)
    return summarise(parse_log_text(text), Window(), 4)


@pytest.mark.parametrize("card", sorted(RECIPES))
@pytest.mark.parametrize("groups", ["logged", None])
def test_a_run_without_grouped_query_attention_names_its_card_and_the_flag(card, groups):
    """The recipe's arguments with ``group_query_attention False`` (``num_query_groups`` still logged, or None):
    the model is the card's but for the flag, and the footnote points to docs/flops.md's caveat."""
    row = _row(card, {"group_query_attention": False, **({"num_query_groups": None} if groups is None else {})})
    assert row.ok and row.model == f"unregistered model ({card} but group_query_attention False)"
    footnote = format_markdown([row], row, Window()).splitlines()[-1]
    assert "ran without --group-query-attention" in footnote and "docs/flops.md" in footnote


def test_the_footnote_names_no_flag_a_table_does_not_show():
    """A table of a registered model says nothing about grouped-query attention."""
    row = _row("qwen3-30b-a3b", {})
    assert row.ok and row.model == "qwen3-30b-a3b"
    assert "group-query-attention" not in format_markdown([row], row, Window())


def test_up_to_two_changed_sizes_are_named_and_three_are_another_model():
    """One or two sizes other than the card's are named with the run's values, in the card's field order; a third
    makes the run another model, named no card (the hidden size drawn as no registry card's, which could bring the
    run near another card)."""
    card = get_card("qwen3-30b-a3b")
    taken = {published.hidden_size for published in PUBLISHED_CARDS.values()}
    hidden = random.choice([size for size in range(1024, 8192, 256) if size not in taken])
    width = random.choice([size for size in range(256, 2048, 64) if size != card.moe_ffn_hidden_size])
    topk = random.choice([k for k in range(1, 16) if k != card.moe_router_topk])
    assert _row("qwen3-30b-a3b", {"hidden_size": hidden}).model == (
        f"unregistered model (qwen3-30b-a3b but hidden_size {hidden})")
    assert _row("qwen3-30b-a3b", {"hidden_size": hidden, "moe_router_topk": topk}).model == (
        f"unregistered model (qwen3-30b-a3b but hidden_size {hidden}, moe_router_topk {topk})")
    assert _row("qwen3-30b-a3b", {"hidden_size": hidden, "moe_ffn_hidden_size": width,
                                  "moe_router_topk": topk}).model == "unregistered model"


def test_a_proxy_without_grouped_query_attention_is_named_at_its_depth():
    """A shallower run of the card without the flag is the card's proxy at that depth but for the flag."""
    card = get_card("qwen3-30b-a3b")
    depth = random.choice([layers for layers in range(2, 48) if layers != card.num_layers])
    row = _row("qwen3-30b-a3b", {"group_query_attention": False, "num_layers": depth})
    assert row.model == f"unregistered model (qwen3-30b-a3b-proxy-{depth}L but group_query_attention False)"
