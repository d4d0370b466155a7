"""``oellm bench`` smoke test on the tiny card: both sides run, figures are finite, losses agree at the same weights."""

import math

import pytest

from megatron.oellm.bench.harness import BenchConfig, run_benchmark

BF16_LOSS_REL = 2e-2
"""Relative loss difference allowed between the sides in bf16 (same weights, same tokens, different kernels)."""


@pytest.mark.gpu
def test_both_sides_run_with_finite_figures_and_equal_loss(tmp_path) -> None:
    config = BenchConfig(model="qwen3.5-35b-a3b-tiny", seq_length=128, mbs=(1, 2), warmup=1, steps=2,
                         profile_dir=tmp_path)
    report = run_benchmark(config)
    assert [(r.side, r.mbs, r.status) for r in report.results] == [
        ("ours", 1, "ok"), ("ours", 2, "ok"), ("hf", 1, "ok"), ("hf", 2, "ok")]
    for r in report.results:
        for value in (r.step_ms_median, r.tokens_per_s, r.tflops, r.mfu, r.peak_memory_gib, r.loss):
            assert math.isfinite(value) and value > 0, r
    by_key = {(r.side, r.mbs): r for r in report.results}
    for mbs in (1, 2):
        ours, hf = by_key[("ours", mbs)].loss, by_key[("hf", mbs)].loss
        assert abs(ours - hf) <= BF16_LOSS_REL * abs(hf), (mbs, ours, hf)
    assert report.summary["speedup_ours_over_hf"] > 0
    assert set(report.profiles) == {"ours", "hf"}
    for suffix, column in (("", "Self CUDA"), ("_by_shape", "Input Shapes")):
        assert column in (tmp_path / f"ours_top_cuda{suffix}.txt").read_text(), suffix
