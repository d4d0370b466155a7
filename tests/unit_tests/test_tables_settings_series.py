"""``oellm table`` rated a benchmark setting's penalty as scaling: logs of forced vs real routing (or another token
dispatcher, dispatcher backend, attention backend, recompute or FP8 setting) at 8 and 16 nodes, otherwise the same,
landed in one series, and the efficiency column compared them. Each setting's runs are now a series of their own, the
notes name the setting that split them, and the reports' tables (same settings, several node counts) stay one
series. Generated logs, fresh random throughputs."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.recipes import load_recipe
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import (
    Window,
    format_markdown,
    scaling_series,
    sorted_rows,
    summarise,
    unrated_rows_note,
    with_efficiency,
)
from tests.unit_tests.megatron_logs import EXAMPLES, megatron_args, megatron_log

SETTINGS = [
    ("moe_router_force_load_balancing", True, False),
    ("moe_token_dispatcher_type", "flex", "alltoall"),
    ("moe_flex_dispatcher_backend", "hybridep", "deepep"),
    ("attention_backend", "AttnBackend.flash", "AttnBackend.auto"),
    ("recompute_granularity", "full", "selective"),
    ("recompute_method", "uniform", "block"),
    ("recompute_num_layers", 2, 1),
    ("fp8", None, "e4m3"),
    ("fp8_recipe", "delayed", "tensorwise"),
]
"""(argument, the strong recipe's value, another value)."""


def _printed(value: object) -> str:
    """A setting's value as the table prints it: an attention backend by its name (``flash``), not megatron's repr
    ``AttnBackend.flash``."""
    return str(value).removeprefix("AttnBackend.")

READ_WITH = {"fp8_recipe": {"fp8": "hybrid"}}
"""What a run needs for megatron to read the setting (the strong recipe trains in BF16, where the FP8 recipe it
prints is none it uses)."""


def _row(stem: str, number: int, nodes: int, tokens: float, log: str = "", **overrides):
    """The row of a generated log of recipe ``stem``'s row ``number`` run on ``nodes`` nodes at ``tokens``/s/GPU."""
    args = megatron_args(stem, number, {"world_size": nodes * 4, **overrides})
    step_ms = args["global_batch_size"] * args["seq_length"] / tokens / (nodes * 4) * 1000
    text = megatron_log(args, [round(step_ms, 1)] * 10, [120.0] * 10)
    return summarise(parse_log_text(text, log or f"{stem}-{number}.out"), Window(), 4)


@pytest.mark.parametrize("name, ours, other", SETTINGS)
def test_runs_of_another_setting_are_a_series_of_their_own(name, ours, other):
    assert str(megatron_args("qwen3_5_35b_a3b_mn5_strong", 2)[name]) == str(ours)
    runs = [(nodes, value, random.uniform(4000, 7000)) for nodes in (8, 16) for value in (ours, other)]
    random.shuffle(runs)
    by_log = {f"{nodes}n-{value}.out": (nodes, value, tokens) for nodes, value, tokens in runs}
    rows = sorted_rows([_row("qwen3_5_35b_a3b_mn5_strong", 2, nodes, tokens, log, **READ_WITH.get(name, {}),
                             **{name: value})
                        for log, (nodes, value, tokens) in by_log.items()])
    assert all(row.ok for row in rows)
    rated, baseline = with_efficiency(rows)
    _, base_value, base_tokens = by_log[baseline.log]
    assert baseline.nodes == 8
    for row in rated:
        _, value, tokens = by_log[row.log]
        if value == base_value:
            assert row.efficiency == pytest.approx(tokens / base_tokens, rel=1e-3)
        else:
            assert row.efficiency is None
    other_value = other if base_value == ours else ours
    unrated = [number for number, row in enumerate(rated, 1) if row.efficiency is None]
    assert len(unrated) == 2
    note = unrated_rows_note(rated, baseline)
    assert note.endswith(f"; the setting that splits the series (no scaling dimension): {name} {_printed(base_value)} "
                         f"in the baseline, {_printed(other_value)} in rows {unrated[0]}, {unrated[1]}; --baseline-row "
                         "N rates another series"), note
    footnote = format_markdown(rated, baseline, Window()).splitlines()[-1]
    assert f" These rows differ in {name}, so each of its values is a series of its own." in footnote
    series = scaling_series(rated)
    assert sorted(label for label, _ in series) == sorted(
        f"qwen3.5-35b-a3b, seq 4096, GBS 4096, {name} {_printed(value)} (strong scaling)" for value in (ours, other))
    assert all({by_log[row.log][1] for row in members} == {value} for (label, members), value in zip(
        series, [by_log[members[0].log][1] for _, members in series], strict=True))


@pytest.mark.parametrize("stem, baseline_nodes", [("qwen3_5_35b_a3b_mn5_strong", 8), ("qwen3_5_35b_a3b_mn5_weak", 4)])
def test_a_reports_table_stays_one_series(stem, baseline_nodes):
    """The strong (4..128 nodes, MBS 2 on 4 nodes) and weak (GBS 64 x nodes) tables, each row's log from its recipe
    row: every row is rated against the report's baseline, and no setting note is printed."""
    recipe = load_recipe(EXAMPLES / f"{stem}.toml")
    rows = sorted_rows([_row(stem, number, row.nodes, random.uniform(5000, 7000))
                        for number, row in enumerate(recipe.rows, 1)])
    rated, baseline = with_efficiency(rows, baseline_nodes=baseline_nodes)
    assert all(row.efficiency is not None for row in rated) and len(rated) == len(recipe.rows)
    assert unrated_rows_note(rated, baseline) is None
    assert "differ in" not in format_markdown(rated, baseline, Window())
    assert len(scaling_series(rated)) == 1
