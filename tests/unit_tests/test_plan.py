"""Training plans: per-rank contents add up to the model, and bad layouts are refused."""

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import ParallelLayout, ParallelLayoutError
from megatron.oellm.params import parameter_counts
from megatron.oellm.plan import build_plan

JUPITER_235B_LAYOUT = "Et*2|" + "|".join(["t*3"] * 30) + "|t*2L"


@pytest.mark.parametrize("name, layout, world", [
    ("qwen3-235b-a22b", ParallelLayout(tp=2, pp=8, ep=16, sp=True, pipeline_layout=JUPITER_235B_LAYOUT), 256),
    ("qwen3.5-35b-a3b", ParallelLayout(pp=4, ep=4, pipeline_layout="Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L"), 32),
    ("qwen3-30b-a3b", ParallelLayout(tp=2, pp=2, ep=8, etp=1, sp=True), 64),
])
def test_rank_contents_add_up_to_the_whole_model(name, layout, world):
    card = get_card(name)
    plan = build_plan(card, layout, world_size=world)
    layers = sorted(i for r in plan.ranks for i in r.decoder_layers)
    assert layers == list(range(card.num_layers))
    counts = parameter_counts(card)
    dense = sum(r.dense_params for r in plan.ranks) * layout.tp
    experts = sum(r.expert_params for r in plan.ranks) * layout.ep * layout.etp
    assert experts == counts.routed_experts
    assert dense == counts.total - counts.routed_experts
    assert sum(r.has_embedding for r in plan.ranks) == 1 and sum(r.has_output_layer for r in plan.ranks) == 1


def test_virtual_stages_interleave_over_pipeline_ranks():
    plan = build_plan(get_card("qwen3.5-35b-a3b"),
                      ParallelLayout(pp=4, ep=4, pipeline_layout="Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L"), 16)
    assert plan.ranks[0].decoder_layers == tuple(range(0, 6)) + tuple(range(21, 27))
    assert plan.ranks[3].decoder_layers == tuple(range(18, 21)) + (39,)
    assert plan.ranks[0].has_embedding and plan.ranks[3].has_output_layer


def test_bad_layout_is_refused_before_anything_else():
    with pytest.raises(ParallelLayoutError, match="pp x vpp"):
        build_plan(get_card("qwen3-235b-a22b"), ParallelLayout(tp=2, pp=8, vpp=4, ep=16), 256)
    with pytest.raises(ParallelLayoutError, match="world size"):
        build_plan(get_card("qwen3-235b-a22b"), ParallelLayout(tp=2, pp=8, ep=16, pipeline_layout=JUPITER_235B_LAYOUT),
                   100)


def test_recipe_dry_run_prints_the_plan_of_the_jupiter_row(capsys):
    from pathlib import Path

    from megatron.oellm.cli import main

    config = Path(__file__).parents[2] / "examples/oellm/qwen3_235b_a22b_jupiter.toml"
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 0
    out = capsys.readouterr().out
    assert "layout ok: TP2 PP8" in out and "EP16" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("PP rank"))
    ranks = [int(line.split()[0]) for line in lines[header + 1:header + 9]]
    assert ranks == list(range(8))
    assert "148.34 GFLOP/token" in out


def test_plan_command_refuses_a_bad_layout(capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-235b-a22b", "--nodes", "64", "--tp", "2", "--pp", "8", "--vpp", "4",
                 "--ep", "16"]) == 2
    assert "pp x vpp" in capsys.readouterr().out


def test_context_parallelism_shards_dense_optimizer_state_further():
    card = get_card("qwen3-30b-a3b")
    without = build_plan(card, ParallelLayout(tp=2, ep=8, sp=True), 64).ranks[0]
    with_cp = build_plan(card, ParallelLayout(tp=2, ep=8, cp=2, sp=True), 64).ranks[0]
    assert with_cp.dense_params == without.dense_params
    # DP halves with CP2, but the optimizer shards over DP x CP: the dense optimizer bytes stay the same
    assert with_cp.static_bytes == without.static_bytes


def test_plan_checks_context_parallelism_against_the_given_sequence_length(capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2", "--cp", "2", "--seq-length", "4098"]) == 2
    assert "seq_length (4098)" in capsys.readouterr().out


def test_plan_command_refuses_tensor_parallelism_without_sequence_parallelism(capsys):
    """Every card is MoE: megatron-core's MoE layer stops a TP > 1 run without SP at its first forward step."""
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2"]) == 2
    assert "tp=2 without sequence parallelism" in capsys.readouterr().out
    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2", "--sp"]) == 0


@pytest.mark.parametrize("nodes, gpus_per_node", [("0", "4"), ("-1", "4"), ("1", "0"), ("-1", "-4")])
def test_plan_command_refuses_an_empty_or_negative_world(nodes, gpus_per_node, capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", nodes, "--gpus-per-node", gpus_per_node]) == 2
    assert f"--nodes {nodes} x --gpus-per-node {gpus_per_node}: both must be >= 1" in capsys.readouterr().out


@pytest.mark.parametrize("option, message", [("--seq-length", "seq_length must be positive, got 0"),
                                             ("--padded-vocab", "vocab_size must be positive, got 0")])
def test_plan_command_does_not_drop_a_zero_override(option, message, capsys):
    from megatron.oellm.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--nodes", "1", option, "0"]) == 2
    assert message in capsys.readouterr().out
