"""Recipe rows against the reports' run settings, row by row, as the job would run them: the argv Megatron parses and
the environment the sbatch script and ``--local`` export (the Megatron-MoE-ModelZoo row's EP overlap and its
``CUDA_DEVICE_MAX_CONNECTIONS``, a row's own env, the MoonEP points' HybridEP rows). The reports' numbers per row are
:mod:`test_report_reference_numbers`'s."""

from __future__ import annotations

import dataclasses

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.models.parallel import parse_pipeline_layout
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.local import local_environment
from megatron.oellm.recipes.megatron_validation import megatron_refusal

# The Jupiter report's Megatron-MoE-ModelZoo reference is run_235b.sh's H100 baseline (276 TFLOP/s/GPU):
#   A2A_OVERLAP=1 TP=2 PP=8 VPP=4 EP=32 NNODES=32 GBS=2048 bash ./sbatch_benchmarking.sh --recompute-granularity
#   selective --recompute-modules moe_act layernorm --moe-router-force-load-balancing
# (MBS 1, seq 4096, BF16, DeepEP). The report quotes the line without its A2A_OVERLAP=1, but the ModelZoo's own table
# gives 245 TFLOP/s/GPU for it without that overlap and 276 with it ("+1f1b overlap"). sbatch_benchmarking.sh turns
# A2A_OVERLAP=1 into --overlap-moe-expert-parallel-comm --delay-wgrad-compute with CUDA_DEVICE_MAX_CONNECTIONS=32
# and NVTE_{FWD,BWD}_LAYERNORM_SM_MARGIN=24.
MODEL_ZOO_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "32", "NVTE_FWD_LAYERNORM_SM_MARGIN": "24",
                 "NVTE_BWD_LAYERNORM_SM_MARGIN": "24"}


def _jupiter():
    return load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")


def test_the_model_zoo_row_is_run_235b_sh_with_its_a2a_overlap(parse_megatron):
    recipe = _jupiter()
    number, row = next((n, r) for n, r in enumerate(recipe.rows, start=1) if "ModelZoo" in r.label)
    resolved = resolve_row(recipe, row)
    args = parse_megatron(resolved.argv)
    assert (row.nodes * recipe.cluster.gpus_per_node, row.global_batch_size, row.micro_batch_size) == (256, 2048, 1)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (2, 8)
    assert (args.expert_model_parallel_size, args.seq_length) == (32, 4096)
    assert len(parse_pipeline_layout(args.pipeline_model_parallel_layout)) == 8 * 4  # VPP 4
    assert args.bf16 and args.fp8 is None
    assert (args.moe_token_dispatcher_type, args.moe_flex_dispatcher_backend) == ("flex", "deepep")
    assert (args.recompute_granularity, args.recompute_modules) == ("selective", ["moe_act", "layernorm"])
    assert args.moe_router_force_load_balancing
    assert args.overlap_moe_expert_parallel_comm and args.delay_wgrad_compute
    # model_configs/benchmarking/Qwen3-235B-A22B.yaml, which sbatch_benchmarking.sh runs: fused permutation and
    # routing, the fused loss (its "te" impl is refused by megatron-core 0.19.2) and manual GC every 5 iterations
    assert args.moe_permute_fusion and args.moe_router_fusion and args.cross_entropy_loss_fusion
    assert (args.manual_gc, args.manual_gc_interval) == (True, 5)
    assert row.reference == {"tflops_per_gpu": 276}
    script = sbatch_text(recipe, number, resolved)
    for name, value in MODEL_ZOO_ENV.items():
        assert f"export {name}={value}\n" in script and f"export APPTAINERENV_{name}={value}\n" in script
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" not in script


def test_the_current_config_row_keeps_one_device_connection_and_no_overlap(parse_megatron):
    """Row 1 (TP2 without EP overlap) still needs CUDA_DEVICE_MAX_CONNECTIONS=1: megatron-core asserts it."""
    recipe = _jupiter()
    resolved = resolve_row(recipe, recipe.rows[0])
    args = parse_megatron(resolved.argv)
    assert not args.overlap_moe_expert_parallel_comm and not args.delay_wgrad_compute
    script = sbatch_text(recipe, 1, resolved)
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" in script
    assert "LAYERNORM_SM_MARGIN" not in script


def test_a_rows_env_is_what_the_connection_check_and_megatrons_validation_judge():
    """A TP2 row without EP overlap under a row env of CUDA_DEVICE_MAX_CONNECTIONS=32 would stop at megatron's
    assertion on the cluster: refused now, naming the setting; with the overlap flags it resolves and validates."""
    recipe = _jupiter()
    current = dataclasses.replace(recipe.rows[0], env={"CUDA_DEVICE_MAX_CONNECTIONS": "32"})
    with pytest.raises(RecipeError, match=r"CUDA_DEVICE_MAX_CONNECTIONS=1.*the job's env sets '32'"):
        resolve_row(recipe, current)
    model_zoo = next(r for r in recipe.rows if "ModelZoo" in r.label)
    resolved = resolve_row(recipe, model_zoo)
    assert recipe.row_env(model_zoo)["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert recipe.row_env(model_zoo)["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"  # the cluster's stays
    assert megatron_refusal(resolved.argv, resolved.world_size, recipe.row_env(model_zoo)) is None


def test_a_row_env_value_that_is_not_text_is_refused_naming_the_row(tmp_path, capsys):
    config = tmp_path / "r.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_235b_a22b_jupiter.toml"}"\n'
                      "[[rows]]\nnodes = 64\nglobal_batch_size = 2048\nmicro_batch_size = 1\n"
                      "env = { CUDA_DEVICE_MAX_CONNECTIONS = 32 }\n")
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert "row 1 env: CUDA_DEVICE_MAX_CONNECTIONS = 32 is not a string; quote it" in capsys.readouterr().err


def test_local_runs_export_the_rows_env():
    recipe = _jupiter()
    model_zoo = next(r for r in recipe.rows if "ModelZoo" in r.label)
    assert local_environment(recipe, model_zoo)["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "24"
    assert local_environment(recipe, recipe.rows[0])["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_the_sweeps_overlap_row_runs_with_the_model_zoos_overlap_env():
    """With CUDA_DEVICE_MAX_CONNECTIONS=1 the overlap's streams share one hardware queue: the row would time the
    overlap without what makes it overlap."""
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter_sweep.toml")
    number, row = next((n, r) for n, r in enumerate(recipe.rows, start=1) if "overlap" in r.label)
    script = sbatch_text(recipe, number, resolve_row(recipe, row))
    for name, value in MODEL_ZOO_ENV.items():
        assert f"export {name}={value}\n" in script
    assert all(recipe.row_env(other)["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" for other in recipe.rows if other != row)


# kpoeppel's real-routing points on MN5 that ran MoonEP (megatron-core 0.19.2 has no MoonEP backend): recipe stem ->
# [(nodes, GBS)]. The Qwen3.5-like rows are marked "no GC"; no Qwen3-30B-A3B row is marked "GC". The 30B (8, 1024)
# point is the HybridEP reference row of the same table.
MOONEP_POINTS = {"qwen3_5_35b_a3b_mn5_routing": [(8, 1024), (16, 2048), (16, 4096)],
                 "qwen3_30b_a3b_mn5": [(8, 1024), (8, 4096), (16, 2048)]}


def test_every_moonep_real_routing_point_has_a_hybridep_row_without_gc(parse_megatron):
    """Each real-routing scaling point of the report's MoonEP rows (seq 4096, MBS 4 as the report's setup) has a row
    the cluster can run: HybridEP, real routing, the report's memory settings and no GC, and no reference (the
    report's number is MoonEP's)."""
    for stem, points in MOONEP_POINTS.items():
        recipe = load_recipe(EXAMPLES / f"{stem}.toml")
        rows = {}
        for row in recipe.rows:
            args = parse_megatron(resolve_row(recipe, row).argv)
            if (not args.moe_router_force_load_balancing and args.seq_length == 4096
                    and args.moe_flex_dispatcher_backend == "hybridep" and args.moe_token_dispatcher_type == "flex"
                    and args.train_iters == 10):
                rows.setdefault((row.nodes, row.global_batch_size), []).append((row, args))
        for point in points:
            assert point in rows, f"{stem}: no HybridEP real-routing row at {point} (nodes, GBS)"
            for row, args in rows[point]:
                assert args.micro_batch_size == 4
                assert not args.manual_gc and args.mmap_bin_files
                # the report's NCCL exports (NCCL reads NCCL_MIN_NCHANNELS; it reads no NCCL_NCHANNELS_PER_PEER)
                env = recipe.row_env(row)
                assert env["NCCL_MIN_NCHANNELS"] == env["NCCL_NCHANNELS_PER_PEER"] == "4"
                assert "grouped path" in row.label or not row.reference
