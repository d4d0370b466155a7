"""Every example recipe resolves, every flag exists in megatron-core, and the values are the reports' settings."""

from __future__ import annotations

import dataclasses

import pytest
from recipe_helpers import CONFIGS, EXAMPLES, runnable_rows

from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import parse_pipeline_layout
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row, sbatch_text

# The reports' tables (MN5 #438 and the Jupiter 235B report), typed in from the reports: (nodes, GBS, MBS).
QWEN3_5_STRONG = [(4, 4096, 2), (8, 4096, 4), (16, 4096, 4), (32, 4096, 4), (64, 4096, 4), (128, 4096, 4)]
QWEN3_5_WEAK = [(4, 256, 2), (8, 512, 4), (16, 1024, 4), (32, 2048, 4), (64, 4096, 4)]
MN5_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "8", "NCCL_MIN_NCHANNELS": "4", "NCCL_NCHANNELS_PER_PEER": "4",
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def _load(stem: str):
    return load_recipe(EXAMPLES / f"{stem}.toml")


def _parsed_rows(stem: str, parse_megatron):
    recipe = _load(stem)
    return recipe, [parse_megatron(resolve_row(recipe, row).argv) for row in recipe.rows]


def test_every_table_has_a_config_and_a_wrapper():
    stems = {p.stem for p in CONFIGS}
    assert stems == {"qwen3_5_35b_a3b_mn5_strong", "qwen3_5_35b_a3b_mn5_weak", "qwen3_5_35b_a3b_mn5_routing",
                     "qwen3_5_35b_a3b_mn5_attention", "qwen3_30b_a3b_mn5", "oellm_ckda_hybrid_mn5",
                     "qwen3_235b_a22b_jupiter", "qwen3_235b_a22b_jupiter_sweep"}
    for stem in stems:
        wrapper = (EXAMPLES / f"{stem}.sh").read_text()
        assert f'recipe "$here/{stem}.toml" "$@"' in wrapper


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_row_parses_with_megatrons_own_parser(config, parse_megatron):
    recipe = load_recipe(config)
    for row in runnable_rows(config, recipe):
        resolved = resolve_row(recipe, row)
        args = parse_megatron(resolved.argv)  # SystemExit on any flag megatron-core 0.19.2 does not know
        assert args.global_batch_size == row.global_batch_size
        assert args.micro_batch_size == row.micro_batch_size
        assert args.seq_length == (row.seq_length or recipe.seq_length)
        assert args.train_iters == (row.train_iters or recipe.train_iters)
        assert resolved.world_size == row.nodes * 4
        assert args.log_throughput and args.log_interval == 1


def test_qwen3_5_settings_are_the_reports(parse_megatron):
    for stem in ("qwen3_5_35b_a3b_mn5_strong", "qwen3_5_35b_a3b_mn5_weak", "qwen3_5_35b_a3b_mn5_routing",
                 "qwen3_5_35b_a3b_mn5_attention"):
        recipe, parsed = _parsed_rows(stem, parse_megatron)
        assert dict(recipe.cluster.env) == MN5_ENV
        for row, args in zip(recipe.rows, parsed, strict=True):
            assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (1, 4)
            assert (args.expert_model_parallel_size, args.expert_tensor_parallel_size) == (4, 1)
            assert args.bf16 and args.fp8 is None
            assert args.vocab_size == 262144 and args.num_layers == 80 and args.seq_length == 4096
            assert args.moe_token_dispatcher_type == "flex"
            assert args.moe_flex_dispatcher_backend == "hybridep" and args.moe_hybridep_num_sms == 16
            # ibaucells' "1 layer" of a GPTModel is a (mixer, MoE) pair of the HybridModel pattern; kpoeppel's rows
            # ("no GC") ran a HybridModel, where his "1 layer" is one pattern symbol
            assert (args.recompute_granularity, args.recompute_method, args.recompute_num_layers) == (
                "full", "uniform", 1 if "no GC" in row.label else 2)
            # The report's TE cross entropy is refused by megatron-core 0.19.2's validate_args ("disabled due to
            # stability issues"): the recipes use the fused native implementation and say so.
            assert args.cross_entropy_loss_fusion and args.cross_entropy_fusion_impl == "native"
            assert args.use_distributed_optimizer and args.overlap_grad_reduce and args.overlap_param_gather
            assert args.overlap_p2p_comm
            # the real-routing rows of kpoeppel's table are marked "no GC" (MoonEP there, HybridEP here)
            assert (args.manual_gc, args.manual_gc_interval) == ((False, 0) if "no GC" in row.label else (True, 10))
            assert args.optimizer == "adam"
            assert args.moe_router_load_balancing_type == ["global_aux_loss"] and args.moe_aux_loss_coeff == [1e-3]
            # The layout Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L as pipes in the hybrid pattern: 8 segments = PP4 x VPP2.
            segments = args.hybrid_layer_pattern.split("|")
            assert [len(s) // 2 for s in segments] == [6, 6, 6, 3, 6, 6, 6, 1]
            assert "".join(segments) == get_card("qwen3.5-35b-a3b").hybrid_layer_pattern
            assert args.pipeline_model_parallel_layout is None


def test_qwen3_5_rows_are_the_reports_tables(parse_megatron):
    for stem, table in (("qwen3_5_35b_a3b_mn5_strong", QWEN3_5_STRONG), ("qwen3_5_35b_a3b_mn5_weak", QWEN3_5_WEAK)):
        recipe, parsed = _parsed_rows(stem, parse_megatron)
        rows = [(row.nodes, args.global_batch_size, args.micro_batch_size) for row, args in zip(recipe.rows, parsed, strict=True)]
        assert rows == table
        assert all(args.moe_router_force_load_balancing and args.attention_backend.name == "flash"
                   for args in parsed)
    assert all(gbs == 64 * nodes for nodes, gbs, _ in QWEN3_5_WEAK)


def test_qwen3_5_routing_and_attention_rows(parse_megatron):
    _, (forced, real, *_moonep_points) = _parsed_rows("qwen3_5_35b_a3b_mn5_routing", parse_megatron)
    assert forced.moe_router_force_load_balancing and not real.moe_router_force_load_balancing
    assert real.train_iters == 40 and forced.train_iters == 10
    assert all(a.global_batch_size == 4096 and a.micro_batch_size == 4 for a in (forced, real))
    recipe, (flash, auto) = _parsed_rows("qwen3_5_35b_a3b_mn5_attention", parse_megatron)
    assert (flash.attention_backend.name, auto.attention_backend.name) == ("flash", "auto")
    assert {row.nodes for row in recipe.rows} == {4} and flash.micro_batch_size == auto.micro_batch_size == 2


def test_qwen3_30b_layout_dispatchers_and_sequence_lengths(parse_megatron):
    recipe, parsed = _parsed_rows("qwen3_30b_a3b_mn5", parse_megatron)
    for args in parsed:
        assert args.pipeline_model_parallel_layout == "Et*7|t*7|t*7|t*6|t*7|t*7|t*6|t*1L"
        assert args.hybrid_layer_pattern is None and args.num_layers == 48
        # The report's Qwen3-30B-A3B runs are not marked "GC" (manual GC, no mmap of the .bin files).
        assert not args.manual_gc and args.mmap_bin_files
    # Their references ran TE's grouped-tensor experts, which the recipe does not configure: the rows say so.
    for row in recipe.rows:
        assert bool(row.reference) == ("grouped path, not reproduced" in row.label)
    dispatch = {(a.moe_token_dispatcher_type, a.moe_flex_dispatcher_backend if a.moe_token_dispatcher_type == "flex"
                 else None, a.seq_length) for a in parsed}
    for seq in (4096, 8192, 24576):
        assert ("flex", "hybridep", seq) in dispatch and ("alltoall", None, seq) in dispatch
    assert all(a.moe_hybridep_num_sms is None for a in parsed if a.moe_token_dispatcher_type == "alltoall")


def test_ckda_document_masked_rows_are_refused_until_masking_is_wired():
    """Document masking is not wired: the report's masked rows 1-2 would run unmasked, so they are refused."""
    recipe = _load("oellm_ckda_hybrid_mn5")
    for row in recipe.rows[:2]:
        with pytest.raises(RecipeError, match="document masking is not wired in this release"):
            resolve_row(recipe, row)
    assert "--dataloader-inter-document-masking" not in resolve_row(recipe, recipe.rows[2]).argv


def test_ckda_table_is_mbs1_vpp2_and_only_the_gc_rows_have_the_reports_gc_settings(parse_megatron):
    """The report's "GC" host settings are manual GC every 10 iterations and no mmap of the .bin files: the "start
    ... no GC" row has neither (it kept --no-mmap-bin-files from the base)."""
    recipe = _load("oellm_ckda_hybrid_mn5")
    unmasked = dataclasses.replace(recipe, megatron_flags={**recipe.megatron_flags,
                                                           "dataloader-inter-document-masking": False})
    parsed = [parse_megatron(resolve_row(unmasked, row).argv) for row in unmasked.rows]
    for args in parsed:
        assert args.seq_length == 8192 and args.micro_batch_size == 1
        assert len(args.hybrid_layer_pattern.split("|")) == 2 * args.pipeline_model_parallel_size
        assert set(args.hybrid_layer_pattern) == {"K", "*", "E", "|"}
    assert [a.manual_gc for a in parsed] == [False, True, True]
    assert [a.mmap_bin_files for a in parsed] == [True, False, False]
    assert [a.reset_position_ids for a in parsed] == [True, True, False]


def test_qwen3_235b_settings_are_the_jupiter_reports(parse_megatron):
    recipe, parsed = _parsed_rows("qwen3_235b_a22b_jupiter", parse_megatron)
    current = parsed[0]
    assert (current.tensor_model_parallel_size, current.pipeline_model_parallel_size) == (2, 8)
    assert (current.expert_model_parallel_size, current.expert_tensor_parallel_size) == (16, 1)
    assert current.sequence_parallel
    assert (current.global_batch_size, current.micro_batch_size, recipe.rows[0].nodes) == (2048, 1, 64)
    assert (current.fp8, current.fp8_recipe, current.fp8_param_gather) == ("hybrid", "blockwise", True)
    assert current.moe_router_dtype == "fp32" and current.moe_router_force_load_balancing
    assert (current.moe_token_dispatcher_type, current.moe_flex_dispatcher_backend) == ("flex", "hybridep")
    assert current.recompute_granularity == "selective" and current.recompute_modules == ["moe_act", "layernorm"]
    # Placement: 4 layers per virtual stage with E and L counted as one layer each -> PP8 x VPP3, 94 layers.
    stages = parse_pipeline_layout(current.pipeline_model_parallel_layout)
    assert len(stages) == 24 and sum(s.count("decoder") for s in stages) == 94
    assert [len(s) for s in stages] == [4] * 24
    model_zoo, bridge = parsed[1], parsed[2]
    assert model_zoo.fp8 is None and model_zoo.moe_flex_dispatcher_backend == "deepep"
    assert bridge.fp8_recipe == "tensorwise"
    for args in (model_zoo, bridge):
        assert args.expert_model_parallel_size == 32
        assert len(parse_pipeline_layout(args.pipeline_model_parallel_layout)) == 8 * 4
    assert [row.reference for row in recipe.rows] == [
        {"tflops_per_gpu_low": 170, "tflops_per_gpu_high": 175}, {"tflops_per_gpu": 276},
        {"tflops_per_gpu_low": 233, "tflops_per_gpu_high": 238}]
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script


def test_235b_sweep_changes_one_knob_per_row(parse_megatron):
    recipe, parsed = _parsed_rows("qwen3_235b_a22b_jupiter_sweep", parse_megatron)
    base = vars(parsed[0])
    assert len(parsed) >= 10
    for row, args in zip(recipe.rows[1:], parsed[1:], strict=True):
        changed = {k for k, v in vars(args).items() if base[k] != v}
        assert changed, f"sweep row {row.label!r} changes nothing"
    knobs = {row.label for row in recipe.rows}
    assert {"EP32", "DeepEP instead of HybridEP", "BF16 (no FP8)"} <= knobs


def test_mn5_sbatch_exports_the_reports_environment():
    recipe = _load("qwen3_5_35b_a3b_mn5_strong")
    script = sbatch_text(recipe, 2, resolve_row(recipe, recipe.rows[1]))
    for name, value in MN5_ENV.items():
        assert f"export {name}={value}" in script
    assert "#SBATCH --nodes=8" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "#SBATCH --gpus-per-node=4" in script
    assert "--rdzv-backend c10d" in script and "apptainer exec --nv" in script
