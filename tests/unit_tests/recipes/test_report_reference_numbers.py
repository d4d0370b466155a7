"""Every report number a recipe row records is the report's, and no number the report gives for that row is left out.

The tables are typed in from the two benchmark reports (MN5 #438 by ibaucells and kpoeppel; the Jupiter Qwen3-235B-A22B
optimisation report), row for row as the recipes list them: (nodes, GBS, MBS, the row's report numbers). A row whose
numbers are MoonEP's, or a configuration the report does not measure, records none.
"""

from __future__ import annotations

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.peaks import peak_tflops
from megatron.oellm.recipes import load_recipe

# ibaucells' strong- and weak-scaling tables (step time, tokens/s/GPU, TFLOP/s/GPU, MFU).
STRONG = [
    (4, 4096, 2, {"step_time_s": 167.2, "tokens_per_s_per_gpu": 6270, "tflops_per_gpu": 119.8, "mfu_percent": 12.1}),
    (8, 4096, 4, {"step_time_s": 75.2, "tokens_per_s_per_gpu": 6971, "tflops_per_gpu": 133.2, "mfu_percent": 13.5}),
    (16, 4096, 4, {"step_time_s": 38.3, "tokens_per_s_per_gpu": 6851, "tflops_per_gpu": 130.9, "mfu_percent": 13.2}),
    (32, 4096, 4, {"step_time_s": 19.8, "tokens_per_s_per_gpu": 6636, "tflops_per_gpu": 126.8, "mfu_percent": 12.8}),
    (64, 4096, 4, {"step_time_s": 10.6, "tokens_per_s_per_gpu": 6197, "tflops_per_gpu": 118.4, "mfu_percent": 12.0}),
    (128, 4096, 4, {"step_time_s": 6.0, "tokens_per_s_per_gpu": 5455, "tflops_per_gpu": 104.3, "mfu_percent": 10.5}),
]
WEAK = [
    (4, 256, 2, {"step_time_s": 10.9, "tokens_per_s_per_gpu": 5987, "tflops_per_gpu": 114.4, "mfu_percent": 11.6}),
    (8, 512, 4, {"step_time_s": 10.3, "tokens_per_s_per_gpu": 6375, "tflops_per_gpu": 121.8, "mfu_percent": 12.3}),
    (16, 1024, 4, {"step_time_s": 10.4, "tokens_per_s_per_gpu": 6287, "tflops_per_gpu": 120.1, "mfu_percent": 12.1}),
    (32, 2048, 4, {"step_time_s": 10.7, "tokens_per_s_per_gpu": 6138, "tflops_per_gpu": 117.3, "mfu_percent": 11.9}),
    STRONG[4],  # the 64-node run closes both tables
]
ATTENTION = [
    (4, 4096, 2, {"step_time_s": 167.2, "tokens_per_s_per_gpu": 6270, "tflops_per_gpu": 119.8, "mfu_percent": 12.1}),
    (4, 4096, 2, {"step_time_s": 164.8, "tokens_per_s_per_gpu": 6361, "tflops_per_gpu": 121.5, "mfu_percent": 12.3}),
]
# Forced balancing (the strong table's 8-node run) and real routing: ibaucells gives 6,016 tokens/s/GPU and 115.0
# TFLOP/s/GPU; kpoeppel's Qwen3.5 table repeats that row ("above: HybridEP 8 4096 real") with its MFU, 11.6 %.
# Rows 3-5 are kpoeppel's MoonEP points run with HybridEP: no reference.
ROUTING = [
    (8, 4096, 4, {"step_time_s": 75.2, "tokens_per_s_per_gpu": 6971, "tflops_per_gpu": 133.2, "mfu_percent": 13.5}),
    (8, 4096, 4, {"tokens_per_s_per_gpu": 6016, "tflops_per_gpu": 115.0, "mfu_percent": 11.6}),
    (8, 1024, 4, {}),
    (16, 2048, 4, {}),
    (16, 4096, 4, {}),
]
# kpoeppel's Qwen3-30B-A3B HybridEP rows (8 nodes, GBS 1024); the all-to-all rows and the MoonEP points have none.
QWEN3_30B = [
    (8, 1024, 4, {"tokens_per_s_per_gpu": 7519, "tflops_per_gpu": 215.0, "mfu_percent": 21.7}),
    (8, 1024, 4, {"tokens_per_s_per_gpu": 5919, "tflops_per_gpu": 169.2, "mfu_percent": 17.1}),
    (8, 1024, 4, {}), (8, 1024, 4, {}), (8, 2048, 2, {}), (8, 2048, 2, {}), (8, 640, 1, {}), (8, 640, 1, {}),
    (8, 4096, 4, {}), (16, 2048, 4, {}),
]
# kpoeppel's production hybrid step table (no MFU given).
# The CKDA step table ran MoonEP throughout (and its "+ GC" step after code changes and 2 x 8k packing): the rows,
# on HybridEP, quote it in their labels and record no reference.
CKDA = [(8, 1024, 1, {}), (8, 1024, 1, {}), (8, 1024, 1, {})]
# The Jupiter report's Goal table: current 170-175, ModelZoo 276; Megatron Bridge 238 in the Goal table and 233 in
# its own section, so the row holds both ends.
JUPITER = [
    (64, 2048, 1, {"tflops_per_gpu_low": 170, "tflops_per_gpu_high": 175}),
    (64, 2048, 1, {"tflops_per_gpu": 276}),
    (64, 2048, 1, {"tflops_per_gpu_low": 233, "tflops_per_gpu_high": 238}),
]
TABLES = {"qwen3_5_35b_a3b_mn5_strong": STRONG, "qwen3_5_35b_a3b_mn5_weak": WEAK,
          "qwen3_5_35b_a3b_mn5_attention": ATTENTION, "qwen3_5_35b_a3b_mn5_routing": ROUTING,
          "qwen3_30b_a3b_mn5": QWEN3_30B, "oellm_ckda_hybrid_mn5": CKDA, "qwen3_235b_a22b_jupiter": JUPITER}
MN5 = [stem for stem in TABLES if "jupiter" not in stem]


@pytest.mark.parametrize("stem", sorted(TABLES))
def test_every_rows_report_numbers_are_the_reports(stem):
    recipe = load_recipe(EXAMPLES / f"{stem}.toml")
    rows = [(row.nodes, row.global_batch_size, row.micro_batch_size, dict(row.reference)) for row in recipe.rows]
    assert rows == TABLES[stem]


@pytest.mark.parametrize("stem", MN5)
def test_mn5_mfu_is_the_tflops_over_the_h100_peak(stem):
    """kpoeppel: "MFU = TFLOP/s / 989 (H100 dense bf16)". A row that records both must agree to the report's
    rounding, so a mistyped TFLOP/s or MFU shows."""
    peak = peak_tflops("h100-sxm")
    recipe = load_recipe(EXAMPLES / f"{stem}.toml")
    checked = 0
    for row in recipe.rows:
        if "mfu_percent" in row.reference:
            assert row.reference["mfu_percent"] == pytest.approx(100 * row.reference["tflops_per_gpu"] / peak,
                                                                  abs=0.051), row
            checked += 1
    assert checked or stem == "oellm_ckda_hybrid_mn5"


@pytest.mark.parametrize("stem", MN5)
def test_mn5_step_time_and_tokens_per_gpu_agree(stem):
    """Tokens per step (GBS x sequence) over step time and GPUs is the report's tokens/s/GPU to within its rounding
    of the step time (one decimal: under 1 % at these step times)."""
    recipe = load_recipe(EXAMPLES / f"{stem}.toml")
    for row in recipe.rows:
        reference = row.reference
        if "step_time_s" in reference:
            gpus = row.nodes * recipe.cluster.gpus_per_node
            rate = row.global_batch_size * (row.seq_length or recipe.seq_length) / (reference["step_time_s"] * gpus)
            assert rate == pytest.approx(reference["tokens_per_s_per_gpu"], rel=0.01), row
