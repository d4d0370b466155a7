"""``oellm plan`` takes a hybrid model's pipeline stages as its run does: ``|`` in ``--hybrid-layer-pattern``.

megatron-core 0.19.2's ``validate_args`` refuses ``--pipeline-model-parallel-layout`` and
``--num-virtual-stages-per-pipeline-rank`` beside ``--hybrid-layer-pattern``, yet ``oellm plan qwen3.5-35b-a3b --pp 4
--pipeline-layout 'E|t*20|t*20|L'`` (or ``--pp 2 --vpp 2``) printed ``checks ... OK``. The plan now refuses both for a
hybrid card, naming the pattern of the same stages; takes ``--hybrid-layer-pattern``; and at PP > 1 prints the pattern
the run needs (text and ``--json``), the one the recipes pass.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from pathlib import Path

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, layout_from_counts, pipelined_hybrid_pattern
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row

HYBRIDS = ["qwen3.5-35b-a3b", "oellm-ckda-hybrid"]
RECIPES = sorted(path for path in (Path(__file__).parents[2] / "examples" / "oellm").glob("*.toml")
                 if not path.name.startswith("_"))


def _random_counts(layers: int, stages: int) -> list[int]:
    """``layers`` decoder layers over ``stages`` stages, each at least one, drawn afresh."""
    cuts = sorted(random.sample(range(1, layers), stages - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, layers], strict=True)]


def _refusal(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one ``error:`` line ``oellm plan`` prints for ``argv`` (exit 2, nothing on stdout)."""
    assert cli.main(["plan", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured
    return captured.err.strip()


def test_a_pipeline_layout_for_a_hybrid_card_is_refused_naming_the_pattern_of_its_stages(capsys):
    name = random.choice(HYBRIDS)
    card = get_card(name)
    pp, vpp = random.choice([2, 4]), random.choice([1, 2])
    layout = layout_from_counts(_random_counts(card.num_layers, pp * vpp))
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=pp, pipeline_layout=layout))
    line = _refusal([name, "--nodes", "2", "--pp", str(pp), "--pipeline-layout", layout], capsys)
    assert line.startswith(f"oellm plan: error: --pipeline-layout {layout!r}: {name} is a hybrid model")
    assert "--pipeline-model-parallel-layout" in line and line.endswith(f"--hybrid-layer-pattern {shlex.quote(pattern)}")


def test_the_briefs_examples_are_refused(capsys):
    for argv in (["--pp", "4", "--pipeline-layout", "E|t*20|t*20|L"], ["--pp", "2", "--vpp", "2"]):
        line = _refusal(["qwen3.5-35b-a3b", "--nodes", "1", *argv], capsys)
        assert "splits its pipeline stages with '|' in --hybrid-layer-pattern" in line, line


def test_vpp_for_a_hybrid_card_is_refused_naming_the_pattern_of_pp_x_vpp_even_stages(capsys):
    name = random.choice(HYBRIDS)
    card = get_card(name)
    pp, vpp = 2, random.choice([d for d in (1, 2, 3, 5) if card.num_layers % (2 * d) == 0])
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=pp, vpp=vpp))
    line = _refusal([name, "--nodes", "1", "--pp", str(pp), "--vpp", str(vpp)], capsys)
    assert f"--vpp {vpp}: {name} is a hybrid model" in line and "--num-virtual-stages-per-pipeline-rank" in line
    assert line.endswith(f"--hybrid-layer-pattern {shlex.quote(pattern)}") and pattern.count("|") == pp * vpp - 1


def test_a_hybrid_plan_takes_its_stages_as_a_pattern_and_prints_it(capsys):
    name = random.choice(HYBRIDS)
    card = get_card(name)
    pp, vpp = random.choice([2, 4]), random.choice([1, 2])
    counts = _random_counts(card.num_layers, pp * vpp)
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=pp, pipeline_layout=layout_from_counts(counts)))
    argv = ["plan", name, "--nodes", str(pp), "--pp", str(pp), "--hybrid-layer-pattern", pattern]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"pipeline     --hybrid-layer-pattern {shlex.quote(pattern)}  (stages {layout_from_counts(counts)})" in out
    assert f" PP{pp} VPP{vpp} " in out
    assert cli.main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["hybrid_layer_pattern"] == pattern
    assert [len(r["decoder_layers"]) for r in report["ranks"]] == [sum(counts[rank::pp]) for rank in range(pp)]


def test_even_stages_print_the_pattern_the_run_needs_and_pp_1_or_a_gpt_card_none(capsys):
    name = random.choice(HYBRIDS)
    card = get_card(name)
    pp = random.choice([d for d in (2, 4, 5) if card.num_layers % d == 0])
    assert cli.main(["plan", name, "--nodes", str(pp), "--pp", str(pp), "--json"]) == 0
    pattern = json.loads(capsys.readouterr().out)["hybrid_layer_pattern"]
    assert pattern.split("|") == [card.hybrid_layer_pattern[i:i + 2 * card.num_layers // pp]
                                  for i in range(0, 2 * card.num_layers, 2 * card.num_layers // pp)]
    assert cli.main(["plan", name, "--nodes", str(pp), "--pp", str(pp)]) == 0
    assert f"--hybrid-layer-pattern {shlex.quote(pattern)}" in capsys.readouterr().out
    for argv in ([name], ["qwen3-30b-a3b", "--pp", "2"]):
        assert cli.main(["plan", *argv, "--nodes", "1", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["hybrid_layer_pattern"] is None
        assert cli.main(["plan", *argv, "--nodes", "1"]) == 0
        assert "--hybrid-layer-pattern" not in capsys.readouterr().out


@pytest.mark.parametrize("case", ["not the card's", "stages not a multiple of pp", "a GPT card"])
def test_a_pattern_the_run_would_refuse_is_refused(case, capsys):
    card = get_card(random.choice(HYBRIDS))
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=3, pipeline_layout=layout_from_counts(
        _random_counts(card.num_layers, 3))))
    if case == "not the card's":
        at = 2 * random.randrange(card.num_layers)
        pattern = pattern.replace("|", "")
        pattern = pattern[:at] + ("*" if pattern[at] != "*" else "G") + pattern[at + 1:]
    name = "qwen3-30b-a3b" if case == "a GPT card" else card.name
    line = _refusal([name, "--nodes", "1", "--pp", "1" if case == "not the card's" else "2",
                     "--hybrid-layer-pattern", pattern], capsys)
    expected = {"not the card's": "without its '|' it is not", "stages not a multiple of pp": "whose '|' marks pipeline "
                "stages", "a GPT card": "is no hybrid model"}[case]
    assert expected in line, line


def _first_resolved_hybrid_row(path: Path):
    """The first row of the recipe at ``path`` that resolves, when its card is hybrid and its PP above 1; else None."""
    recipe = load_recipe(path)
    if get_card(recipe.model).linear_mixer == "none":
        return None
    for row in recipe.rows:
        try:
            resolved = resolve_row(recipe, row)
        except RecipeError:  # rows refused for another reason (the CKDA rows' document masking)
            continue
        return (recipe, resolved) if resolved.layout.pp > 1 else None
    return None


def test_plan_prints_the_pattern_the_hybrid_recipes_pass(capsys):
    """Every hybrid recipe at PP > 1 (Qwen3.5's, the OEL hybrid's): the plan of its row's layout, given as the
    pattern the row passes, prints that pattern; given as the row's ``pipeline_layout`` (or VPP), it is refused naming
    it."""
    rows = [found for found in map(_first_resolved_hybrid_row, RECIPES) if found is not None]
    assert {recipe.model for recipe, _ in rows} >= set(HYBRIDS)
    for recipe, resolved in rows:
        layout, pattern = resolved.layout, resolved.flags["hybrid-layer-pattern"]
        assert "|" in pattern
        argv = [recipe.model, "--nodes", str(resolved.row.nodes), "--gpus-per-node",
                str(recipe.cluster.gpus_per_node), "--tp", str(layout.tp), "--pp", str(layout.pp), "--ep",
                str(layout.ep), "--etp", str(layout.etp), "--cp", str(layout.cp), *(["--sp"] if layout.sp else []),
                "--seq-length", str(resolved.card.seq_length)]
        assert cli.main(["plan", *argv, "--hybrid-layer-pattern", pattern, "--json"]) == 0, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["hybrid_layer_pattern"] == pattern
        stages = (["--pipeline-layout", layout.pipeline_layout] if layout.pipeline_layout
                  else ["--vpp", str(layout.vpp_size)])
        line = _refusal([*argv, *stages], capsys)
        assert line.endswith(f"--hybrid-layer-pattern {shlex.quote(pattern)}"), line


def test_a_pattern_split_into_stages_at_pp_1_is_refused_naming_the_pattern(capsys):
    """At ``--pp 1`` the stages of a pattern with ``|`` are virtual ones, which need PP > 1: the refusal names
    ``--hybrid-layer-pattern``, the flag that split them, as the training entry's check does (the plan's layout check
    named only the layout it derived from the pattern)."""
    card = get_card(random.choice(HYBRIDS))
    stages = random.randint(2, 4)
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=stages, pipeline_layout=layout_from_counts(
        _random_counts(card.num_layers, stages))))
    line = _refusal([card.name, "--nodes", "1", "--pp", "1", "--hybrid-layer-pattern", pattern], capsys)
    assert f"--hybrid-layer-pattern {pattern!r}, whose '|' marks pipeline stages" in line
    assert f"has {stages} stages for pp=1" in line, line



def _uneven_pp_vpp(layers: int) -> tuple[int, int]:
    """A PP >= 2 and VPP >= 2, drawn afresh, whose PP x VPP stages can each hold a layer of ``layers`` but do not
    split them evenly."""
    return random.choice([(pp, vpp) for pp in range(2, layers // 2 + 1) for vpp in range(2, layers // pp + 1)
                          if layers % (pp * vpp)])


def test_vpp_not_dividing_a_hybrid_cards_layers_names_patterns_the_plan_and_megatron_take(capsys):
    """``oellm plan qwen3.5-35b-a3b --pp 4 --vpp 3`` (40 layers, 12 stages) named only "PATTERN: the card's layer
    pattern with '|' ...", while ``--pp 3`` alone named a pattern to paste. The refusal now names the pattern of
    PP x VPP uneven stages (and the counted split's where 40 + 2 splits evenly); each, given back to the plan with
    the same PP, is planned at that VPP, and megatron-core's own counters read PP x VPP segments of the card's
    layers from it."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import (
        get_hybrid_total_layer_count,
        get_hybrid_total_pipeline_segment_count,
    )

    card = get_card(random.choice(HYBRIDS))
    pp, vpp = _uneven_pp_vpp(card.num_layers)
    line = _refusal([card.name, "--nodes", str(pp), "--pp", str(pp), "--vpp", str(vpp)], capsys)
    quoted = re.findall(r"'([GKE*|]+)'", line)
    patterns = [word for word in quoted if "|" in word and word.replace("|", "") == card.hybrid_layer_pattern]
    counted = (card.num_layers + 2) % (pp * vpp) == 0
    assert len(patterns) == 1 + counted, line
    assert f"do not split evenly into PP x VPP = {pp * vpp} stages" in line, line
    for pattern in patterns:
        known = pattern.replace("K", "G")  # megatron-core 0.19.2 has no CKDA symbol; the split is the mixer's own
        assert get_hybrid_total_pipeline_segment_count(known) == pp * vpp
        assert get_hybrid_total_layer_count(known) == len(card.hybrid_layer_pattern)
        assert all(segment and len(segment) % 2 == 0 for segment in pattern.split("|"))
        argv = ["plan", card.name, "--nodes", str(pp), "--pp", str(pp), "--hybrid-layer-pattern", pattern]
        assert cli.main([*argv, "--json"]) == 0, capsys.readouterr().err
        report = json.loads(capsys.readouterr().out)
        assert report["hybrid_layer_pattern"] == pattern and report["layout"]["vpp_size"] == vpp
        assert sum(len(rank["decoder_layers"]) for rank in report["ranks"]) == card.num_layers
