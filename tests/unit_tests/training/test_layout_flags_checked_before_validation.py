"""A malformed pipeline layout or hybrid pattern stages that are not pp x vpp are refused before megatron's
``validate_args``: it expanded ``t*99999999999999`` as written (a MemoryError traceback) and judged a pattern's stages
by its interleaved schedule, naming no flag."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.models.parallel import MAX_EXPANDED_LAYOUT, ParallelLayoutError, pipeline_stages
from tests.unit_tests.training.before_validation import entry_refusing_before_validation
from tests.unit_tests.training.entry_helpers import one_error_line, tiny_moe_run

HYBRID = "qwen3.5-35b-a3b-tiny"


def test_a_huge_repeat_is_refused_before_validation(monkeypatch, capsys) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    count = MAX_EXPANDED_LAYOUT * random.randint(10, 10**6)
    layout = f"Et*{count}|tL"
    assert entry.main([*tiny_moe_run(), "--pipeline-model-parallel-size", "2",
                       "--pipeline-model-parallel-layout", layout]) == 2
    line = one_error_line(capsys)
    assert f"pipeline layout {layout!r}" in line and "expands it past" in line


def test_layout_stages_not_a_multiple_of_pp_are_refused_before_validation(monkeypatch, capsys) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    assert entry.main([*tiny_moe_run(), "--pipeline-model-parallel-size", "2",
                       "--pipeline-model-parallel-layout", "Et|t|L"]) == 2
    assert "has 3 stages, not a multiple of pp (2)" in one_error_line(capsys)


@pytest.mark.parametrize("pattern", ["GEGEGE*E|", "GEGE|GE*E", "|GEGEGE*E"])
def test_hybrid_stages_at_pp_1_are_refused_naming_the_pattern(monkeypatch, capsys, pattern: str) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    assert entry.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch", "--hybrid-layer-pattern", pattern]) == 2
    line = one_error_line(capsys)
    assert f"--hybrid-layer-pattern {pattern!r}" in line and "for pp=1, set by" in line
    assert "Megatron's --pipeline-model-parallel-size: stages beyond one per pipeline rank are virtual stages" in line


def test_a_pattern_stage_splitting_a_layer_is_refused_before_validation(monkeypatch, capsys) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    assert entry.main([*tiny_moe_run(HYBRID), "--oellm-backend", "torch", "--pipeline-model-parallel-size", "2",
                       "--hybrid-layer-pattern", "GEG|EGE*E"]) == 2
    assert "hybrid pattern stage 'GEG' is not whole decoder layers" in one_error_line(capsys)


def test_pp_x_vpp_stages_pass() -> None:
    pp, vpp = random.randint(1, 4), random.randint(1, 3)
    if pp == 1:
        vpp = 1
    stages = pipeline_stages("|".join(["Et"] + ["t"] * (pp * vpp - 2) + ["tL"]) if pp * vpp > 1 else "EtL", pp)
    assert len(stages) == pp * vpp
    with pytest.raises(ParallelLayoutError, match="not a multiple of pp"):
        pipeline_stages("Et|t|tL", 2)
