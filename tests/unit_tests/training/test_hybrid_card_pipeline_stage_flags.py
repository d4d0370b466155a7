"""A hybrid card's run refuses megatron's other stage flags naming the ``--hybrid-layer-pattern`` of the same stages.

The card fills in its pattern; megatron's ``validate_args`` then refused ``--pipeline-model-parallel-layout`` and the
virtual-stage flags "with --hybrid-layer-pattern", a flag the user never gave.
"""

from __future__ import annotations

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError, pipelined_hybrid_pattern
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.model_provider import check_pipeline_stage_flags

HYBRID = "qwen3.5-35b-a3b-tiny"


def _refusal(*flags: str) -> str:
    parsed = parse_oellm_argv(["--oellm-model", HYBRID, "--pipeline-model-parallel-size", "2", *flags])
    with pytest.raises(ParallelLayoutError) as refused:
        check_pipeline_stage_flags(parsed)
    return str(refused.value)


def test_layout_names_the_pattern_of_the_same_stages() -> None:
    message = _refusal("--pipeline-model-parallel-layout", "Et*2|t*2L")
    expected = pipelined_hybrid_pattern(get_card(HYBRID), ParallelLayout(pp=2, pipeline_layout="Et*2|t*2L"))
    assert "\n" not in message
    assert message.startswith("--pipeline-model-parallel-layout 'Et*2|t*2L'")
    assert f"--hybrid-layer-pattern '{expected}'" in message


@pytest.mark.parametrize("flags", [("--num-virtual-stages-per-pipeline-rank", "2"),
                                   ("--num-layers-per-virtual-pipeline-stage", "1")])
def test_virtual_stage_flags_name_the_pattern(flags: tuple[str, str]) -> None:
    message = _refusal(*flags)
    expected = pipelined_hybrid_pattern(get_card(HYBRID), ParallelLayout(pp=2, vpp=2))
    assert message.startswith(f"{flags[0]} {flags[1]}:")
    assert f"--hybrid-layer-pattern '{expected}'" in message


def test_stages_that_do_not_fit_name_what_the_pattern_is() -> None:
    message = _refusal("--num-layers-per-virtual-pipeline-stage", "3")
    assert "--hybrid-layer-pattern PATTERN" in message


def test_gpt_card_keeps_its_layout() -> None:
    parsed = parse_oellm_argv(["--oellm-model", "qwen3-30b-a3b-tiny", "--pipeline-model-parallel-size", "2",
                               "--pipeline-model-parallel-layout", "Et*2|t*2L"])
    check_pipeline_stage_flags(parsed)
