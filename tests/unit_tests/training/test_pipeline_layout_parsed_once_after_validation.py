"""The training entry parses ``--pipeline-model-parallel-layout`` once for its checks of the validated run: the layout
check (``check_layout``) returns the layout it checked, and megatron-core's ``TransformerConfig`` check reads that
layout, whose parsed stages it keeps. Each built a layout of its own from the arguments before, and the layout was
parsed once more. The parse of the command line as given, before megatron's ``validate_args`` (which expands a
layout as written), stays: it refuses a malformed layout before megatron would fail on it."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.models import parallel
from tests.unit_tests.training.entry_helpers import (
    Reached,
    entry_on_a_cpu_node,
    entry_up_to_pretrain,
    refused_line,
    tiny_moe_run,
)

PARSES = 2
"""The parses of the layout on the way to training: the command line as given, then the validated run's layout."""


def _counted_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The layouts :func:`~megatron.oellm.models.parallel.parse_pipeline_layout` is asked to parse from now on."""
    parsed: list[str] = []
    parse = parallel.parse_pipeline_layout

    def counted(layout: str) -> list[list[str]]:
        parsed.append(layout)
        return parse(layout)

    monkeypatch.setattr(parallel, "parse_pipeline_layout", counted)
    return parsed


def _layout_run() -> tuple[str, list[str]]:
    """A two-stage layout of the tiny card's two layers (commas are cosmetic), and the run that gives it."""
    layout = random.choice(["Et|tL", "E,t|t,L", "Et,|tL", "E,t,|t,L"])
    return layout, [*tiny_moe_run(), "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", layout]


def test_a_gpu_nodes_checks_parse_the_validated_layout_once(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", "2")
    layout, run = _layout_run()
    parsed = _counted_parses(monkeypatch)
    with pytest.raises(Reached):
        entry.main(run)
    assert parsed == [layout] * PARSES


def test_the_checks_off_a_gpu_node_parse_the_validated_layout_once(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Off a GPU node megatron-core's config is built as the cluster builds it (``check_model_config_on_cluster``)."""
    entry = entry_on_a_cpu_node(monkeypatch)
    monkeypatch.setenv("WORLD_SIZE", "2")
    layout, run = _layout_run()
    parsed = _counted_parses(monkeypatch)
    assert "the training entry needs a GPU node" in refused_line(entry, capsys, run)  # after every check
    assert parsed == [layout] * PARSES
