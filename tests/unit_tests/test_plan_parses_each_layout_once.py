"""``oellm plan`` parses each pipeline layout string once per call.

The plan read its layout string again for every check, table and line that needed its stages: 8 parses of a hybrid
pattern's derived layout per call (its stage-count check, the layout check, the rank table twice, the layout line, the
run's pattern, the idle-stage check twice), 6 of a ``--pipeline-layout``. The layout now keeps its one parse
(``ParallelLayout.custom_stages``) and the hybrid pattern's stage count is read from its segments.
"""

from __future__ import annotations

import collections
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.models import parallel
from megatron.oellm.models.parallel import ParallelLayout, layout_from_counts, pipelined_hybrid_pattern

OUTPUT_OPTIONS = [[], ["--json"], ["--gpu-memory-gib", "1000"]]
"""Text, JSON, and text with the free-memory column: each reads the stages in its own places."""


def _random_counts(layers: int, stages: int) -> list[int]:
    """``layers`` decoder layers over ``stages`` stages, each at least one, drawn afresh."""
    cuts = sorted(random.sample(range(1, layers), stages - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, layers], strict=True)]


def _parses_of_a_plan(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> dict[str, int]:
    """How many times ``oellm plan argv`` parsed each layout string (the plan must succeed)."""
    parses: collections.Counter[str] = collections.Counter()
    parse = parallel.parse_pipeline_layout

    def counted_parse(layout: str) -> list[list[str]]:
        """The parse, counted per string."""
        parses[layout] += 1
        return parse(layout)

    monkeypatch.setattr(parallel, "parse_pipeline_layout", counted_parse)
    assert cli.main(["plan", *argv]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return dict(parses)


@pytest.mark.parametrize("output", OUTPUT_OPTIONS)
def test_a_hybrid_pattern_with_stages_is_parsed_once(output, monkeypatch, capsys):
    card = get_card("qwen3.5-35b-a3b")
    pp, vpp = random.choice([2, 4]), random.choice([1, 2])
    layout = layout_from_counts(_random_counts(card.num_layers, pp * vpp))
    pattern = pipelined_hybrid_pattern(card, ParallelLayout(pp=pp, pipeline_layout=layout))
    argv = [card.name, "--nodes", "4", "--pp", str(pp), "--hybrid-layer-pattern", pattern,
            "--global-batch-size", str(64 * pp), "--micro-batch-size", "1", *output]
    assert _parses_of_a_plan(argv, monkeypatch, capsys) == {layout: 1}


@pytest.mark.parametrize("output", OUTPUT_OPTIONS)
def test_a_custom_pipeline_layout_is_parsed_once(output, monkeypatch, capsys):
    card = get_card("qwen3-30b-a3b")
    pp, vpp = random.choice([2, 4]), random.choice([1, 2])
    layout = layout_from_counts(_random_counts(card.num_layers, pp * vpp))
    argv = [card.name, "--nodes", "4", "--pp", str(pp), "--ep", "2", "--pipeline-layout", layout,
            "--global-batch-size", str(64 * pp), "--micro-batch-size", "1", *output]
    assert _parses_of_a_plan(argv, monkeypatch, capsys) == {layout: 1}
