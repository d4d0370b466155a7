"""A zero or negative virtual pipeline size is refused, not read as "unset" (found by mutation testing)."""

import random

import pytest

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError, validate_layout


@pytest.mark.parametrize("vpp", [0, -random.randint(1, 8)])
def test_a_vpp_below_one_is_refused_not_treated_as_unset(vpp):
    """``vpp = 0`` would otherwise plan and run as one virtual stage: the user's value silently changed."""
    with pytest.raises(ParallelLayoutError, match=rf"vpp must be >= 1 or unset, got {vpp}"):
        validate_layout(get_card("qwen3-30b-a3b"), ParallelLayout(pp=2, vpp=vpp), world_size=2)


def test_oellm_plan_refuses_vpp_zero(capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--pp", "2", "--vpp", "0"]) == 2
    assert "vpp must be >= 1 or unset, got 0" in capsys.readouterr().err
