"""Rows resolved to flags, and the report's numbers, at the edges a mutation audit of
:mod:`megatron.oellm.recipes.resolve`, :mod:`megatron.oellm.recipes.flag_names`,
:mod:`megatron.oellm.recipes.timing` and :mod:`megatron.oellm.peaks` found unchecked: the micro-batch size in the
batch check, context parallelism's device connections, the cluster's GPUs per node in a row's world size."""

from __future__ import annotations

import dataclasses
import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"  # tp=1, pp=4, ep=4, cp=1 on 4-GPU nodes; MN5 env: 8 connections


def _base_row(**changes):
    """The shipped Qwen3-30B-A3B MN5 recipe and its first row (8 nodes, micro-batch 4) with ``changes``."""
    recipe = load_recipe(BASE)
    return recipe, dataclasses.replace(recipe.rows[0], **changes)


def test_a_global_batch_that_fills_the_ranks_but_not_whole_micro_batches_is_refused():
    """On 32 GPUs at pp=4 (8 data-parallel ranks) with micro-batch 4, a global batch divisible by 8 but not by 32
    leaves a rank a fraction of a micro-batch: megatron asserts at start, after the queue."""
    batch = 8 * random.choice([k for k in range(1, 200) if k % 4])
    recipe, row = _base_row(global_batch_size=batch)
    with pytest.raises(RecipeError, match=rf"global batch {batch} is not divisible by micro batch \(4\) x "
                                          r"data-parallel size \(8 = 32 GPUs.*use a multiple of 32"):
        resolve_row(recipe, row)
    whole = 32 * random.randrange(1, 64)
    assert resolve_row(recipe, dataclasses.replace(row, global_batch_size=whole)).flags["global-batch-size"] == whole


def test_context_parallelism_alone_needs_one_device_connection():
    """megatron-core asserts ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with CP > 1 on Hopper as with TP > 1: a cp=2 row at
    tp=1 under MN5's 8 connections must be refused naming cp, and resolve once the row's env sets 1."""
    recipe, row = _base_row(parallel={"cp": 2})
    with pytest.raises(RecipeError, match=r"tp=1, cp=2 on Hopper needs CUDA_DEVICE_MAX_CONNECTIONS=1.*sets '8'"):
        resolve_row(recipe, row)
    resolved = resolve_row(recipe, dataclasses.replace(row, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}))
    assert resolved.flags["context-parallel-size"] == 2


@pytest.mark.parametrize("gpus_per_node", [2, 8])
def test_a_rows_world_size_is_its_nodes_times_the_clusters_gpus_per_node(tmp_path, gpus_per_node):
    """A cluster of 2- or 8-GPU nodes: the row's world size (the layout and batch checks, the data-parallel size)
    is its nodes x ``cluster.gpus_per_node``, not x 4."""
    nodes = random.choice([8, 16, 32])
    config = tmp_path / "gpus.toml"
    config.write_text(f'extends = "{BASE}"\ntitle = "t"\n[cluster]\ngpus_per_node = {gpus_per_node}\n'
                      f"[[rows]]\nnodes = {nodes}\nglobal_batch_size = 2048\nmicro_batch_size = 1\n")
    recipe = load_recipe(config)
    assert resolve_row(recipe, recipe.rows[0]).world_size == nodes * gpus_per_node
    data_parallel = nodes * gpus_per_node // 4
    odd = data_parallel * 2 + data_parallel // 2  # a multiple of 4 x (nodes / 4) ranks, not of the real ranks
    with pytest.raises(RecipeError, match=rf"data-parallel size \({data_parallel} = {nodes * gpus_per_node} GPUs"):
        resolve_row(recipe, dataclasses.replace(recipe.rows[0], global_batch_size=odd))


def test_a_flag_written_with_underscores_is_refused_with_its_dashed_name_suggested():
    """A flag copied from a Python ``args.`` attribute (``no_check_for_nan_in_loss_and_grad``) is no option; the
    message must name the option the author meant, read with dashes, even where the underscores make the written
    name too unlike any option to be suggested as it stands."""
    from megatron.oellm.recipes.flag_names import check_flag_names

    meant = random.choice(["no-check-for-nan-in-loss-and-grad", "qk-pos-emb-head-dim", "no-tp-comm-split-ag"])
    written = meant.replace("-", "_")
    with pytest.raises(RecipeError, match=rf"'{written}' in the row's flags is not an option of the training entry.*"
                                          rf"\(did you mean '{meant}'\?\)"):
        check_flag_names("the row's flags", {written: random.choice([False, True, 1])})


def test_a_learning_rate_schedule_megatron_would_refuse_is_reported_before_submission():
    """``megatron_refusal`` is what ``--dry-run`` and ``--submit`` ask before a row is queued: a negative
    ``--min-lr`` (a row's flag) passes megatron's ``validate_args`` but its scheduler refuses it at start, so the
    learning-rate check must run too and name the flag."""
    from megatron.oellm.recipes.megatron_validation import megatron_refusal

    recipe, row = _base_row()
    resolved = resolve_row(recipe, row)
    assert megatron_refusal(resolved.argv, resolved.world_size, recipe.cluster.env) is None
    min_lr = -round(random.uniform(1e-6, 1e-3), 7)
    # fixed-point digits: argparse reads "-1e-05" as an option, not a negative number
    refusal = megatron_refusal([*resolved.argv, "--min-lr", f"{min_lr:.7f}"], resolved.world_size,
                               recipe.cluster.env)
    assert refusal is not None and refusal.startswith("ValueError: --min-lr") and "is negative" in refusal


def test_the_validated_arguments_carry_the_training_defaults_the_entry_adds():
    """The entry fills in ``--hidden-dropout 0``, ``--attention-dropout 0`` and ``--eval-interval 1000`` when a row
    does not set them; the pre-submission check must validate that same command line (megatron's own defaults are
    dropout 0.1 and no interval), while a value the row gives stays its own."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster

    recipe, row = _base_row()
    resolved = resolve_row(recipe, row)
    assert "--hidden-dropout" not in resolved.argv and "--eval-interval" not in resolved.argv
    args = validate_on_cluster(resolved.argv, resolved.world_size, recipe.cluster.env)
    assert (args.hidden_dropout, args.attention_dropout, args.eval_interval) == (0.0, 0.0, 1000)
    dropout = round(random.uniform(0.01, 0.5), 3)
    args = validate_on_cluster([*resolved.argv, "--hidden-dropout", str(dropout)], resolved.world_size,
                               recipe.cluster.env)
    assert args.hidden_dropout == dropout and args.attention_dropout == 0.0


def test_a_run_expected_to_end_just_after_its_time_limit_is_refused(tmp_path):
    """The time limit kills the job at the limit: an expected run time a few seconds over it must be refused, one
    exactly at it accepted (10 iterations x step + the start-up allowance against the limit)."""
    from megatron.oellm.recipes.timing import START_UP_S, run_time

    recipe, row = _base_row()
    minutes = random.randrange(20, 120)
    limit = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    over = random.randrange(1, 59)
    for excess, refused in ((0, False), (over, True)):
        step = (minutes * 60 - START_UP_S + excess) / 10
        timed = run_time(dataclasses.replace(row, reference={"step_time_s": step}), limit, 10, 32, None)
        assert timed.expected_s == minutes * 60 + excess
        if refused:
            with pytest.raises(RecipeError, match=rf"would reach its time limit {limit} before its last iteration"):
                timed.check()
        else:
            timed.check()


DATASHEET_DENSE_TFLOPS = {
    "a100": (312.0, None),
    "h100-sxm": (989.0, 1979.0), "h100-pcie": (756.5, 1513.0), "h100-nvl": (835.5, 1670.5),
    "h200-sxm": (989.0, 1979.0), "h200-nvl": (835.5, 1670.5), "gh200": (989.0, 1979.0),
}
"""NVIDIA's dense BF16 / FP8 tensor peaks per GPU (half the datasheet's 2:4-sparsity figures: H100 SXM 1,979 / 3,958,
PCIe 1,513 / 3,026, NVL 1,671 / 3,341; H200 and GH200 share their H100 form factor's tensor cores; A100 BF16 624 with
sparsity, and no FP8 tensor cores)."""


@pytest.mark.parametrize("gpu", sorted(DATASHEET_DENSE_TFLOPS))
def test_every_gpu_peak_is_its_dense_datasheet_number_at_both_precisions(gpu):
    """An MFU is quoted against these peaks (``--oellm-gpu``, the reports' ``mfu_percent``): each GPU's BF16 and FP8
    peak must be its datasheet's dense number, and the GPUs sharing tensor cores must share peaks."""
    from megatron.oellm.peaks import GPU_PEAKS, mfu, peak_tflops

    assert set(GPU_PEAKS) == set(DATASHEET_DENSE_TFLOPS)
    bf16, fp8 = DATASHEET_DENSE_TFLOPS[gpu]
    assert (peak_tflops(gpu), peak_tflops(gpu, "bf16")) == (bf16, bf16)
    achieved = random.uniform(50.0, bf16)
    if fp8 is None:
        with pytest.raises(ValueError, match="no FP8 tensor cores"):
            peak_tflops(gpu, "fp8")
        return
    assert peak_tflops(gpu, "fp8") == fp8
    assert mfu(achieved, peak_tflops(gpu, "fp8")) == pytest.approx(achieved / fp8)
