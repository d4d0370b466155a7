"""``oellm models``: the model catalogue with total and active parameter counts."""

from __future__ import annotations

import argparse
import json
import sys

from megatron.oellm.cards import ModelCard, get_card, list_card_names, placeholder_notes
from megatron.oellm.params import format_count, parameter_counts

HELP = "list the model catalogue with total and active parameter counts"

PERIOD_LEGEND = ("period = the layers' repeating unit in --hybrid-layer-pattern symbols (* attention, G GDN, "
                 "K CKDA, E MoE; the K is ours: megatron-core 0.19.2 has no CKDA layer yet): a G or K card's "
                 "pattern repeats it (oellm plan MODEL --nodes N --pp P prints the run's, with '|' between "
                 "its stages); the others run as GPT models")
"""The table's line on its ``period`` column: ``--hybrid-layer-pattern``'s symbols, as ``oellm plan`` and the
recipes print patterns."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oellm models``."""
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of a table")


def layer_period(card: ModelCard) -> str:
    """One repeat of ``card``'s megatron-core layer pattern (``GEGEGE*E``: a mixer symbol, then ``E``, per layer):
    the column shows patterns in the symbols every ``--hybrid-layer-pattern`` is written in, not letters of its own."""
    return card.hybrid_layer_pattern[:2 * card.full_attention_interval]


def mixer_period(card: ModelCard) -> str:
    """The token mixers of one :func:`layer_period` (``GGG*``: its mixer symbols without the ``E`` of each layer's
    MoE block), in the same symbols: a JSON reader gets one notation, where ``A`` stood for the ``*`` of ``period``."""
    return layer_period(card)[::2]


def catalogue() -> list[dict[str, object]]:
    """One row per registered card: name, family, shape summary and parameter counts (active also without the input
    embedding table, the count the MN5 report quotes for the OEL CKDA hybrid). ``pattern`` is the mixers' period and
    ``period`` the layers' (:func:`layer_period`, which the table shows), both in ``--hybrid-layer-pattern``'s
    symbols (``*`` attention); ``placeholder`` says what a card's numbers rest on placeholder values for (``None``
    for a complete card), the ``note:`` line that ``--json`` prints on stderr only."""
    rows = []
    for name in list_card_names():
        card = get_card(name)
        counts = parameter_counts(card)
        rows.append({
            "name": name,
            "family": card.family,
            "layers": card.num_layers,
            "pattern": mixer_period(card),
            "period": layer_period(card),
            "hidden": card.hidden_size,
            "experts": f"{card.num_experts}x{card.moe_ffn_hidden_size} top-{card.moe_router_topk}"
                       + (f" +shared {card.moe_shared_expert_intermediate_size}"
                          if card.moe_shared_expert_intermediate_size else ""),
            "vocab": card.vocab_size,
            "total_params": counts.total,
            "active_params": counts.active,
            "active_params_without_input_embedding": counts.active_without_input_embedding,
            "placeholder": card.sources.get("placeholder"),
        })
    return rows


def run(args: argparse.Namespace) -> int:
    """Print the catalogue, then a ``note:`` line for the cards whose numbers rest on placeholder values (on stderr
    with ``--json``, whose stdout holds the JSON only: there each such card's ``placeholder`` says it)."""
    rows = catalogue()
    notes = placeholder_notes(get_card(str(row["name"])) for row in rows)
    if args.json:
        print(json.dumps(rows, indent=2))
        for line in notes:
            print(line, file=sys.stderr)
        return 0
    header = f"{'model':<28} {'family':<12} {'layers':>6} {'period':<12} {'hidden':>6} {'experts':<25} {'vocab':>7} " \
             f"{'total':>8} {'active':>8} {'active*':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:<28} {r['family']:<12} {r['layers']:>6} {r['period']:<12} {r['hidden']:>6} "
              f"{r['experts']:<25} {r['vocab']:>7} {format_count(r['total_params']):>8} "
              f"{format_count(r['active_params']):>8} {format_count(r['active_params_without_input_embedding']):>8}")
    print(PERIOD_LEGEND)
    print("active* = active less the input embedding table (a token reads one row of it), as the MN5 report counts the OEL CKDA hybrid")
    for line in notes:
        print(line)
    return 0
