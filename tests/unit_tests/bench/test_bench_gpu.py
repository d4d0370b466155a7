"""``oellm bench`` smoke test on the tiny card: each of our sides runs beside transformers' with finite figures, and
the losses agree at the same weights."""

import math

import pytest

from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.bench.harness import BenchConfig, run_benchmark

BF16_LOSS_REL = 2e-2
"""Relative loss difference allowed between the sides in bf16 (same weights, same tokens, different kernels)."""

OUR_SIDES = [pytest.param("ours", id="ours"), pytest.param("te", id="te", marks=pytest.mark.skipif(
    transformer_engine_import_error() is not None, reason="the te side needs Transformer Engine"))]
"""Our sides: the torch-native backend, and Transformer Engine's where it imports."""


@pytest.mark.gpu
@pytest.mark.parametrize("ours", OUR_SIDES)
def test_our_side_and_transformers_run_with_finite_figures_and_equal_loss(ours: str, tmp_path) -> None:
    config = BenchConfig(model="qwen3.5-35b-a3b-tiny", seq_length=128, mbs=(1, 2), warmup=1, steps=2,
                         sides=(ours, "hf"), profile_dir=tmp_path)
    report = run_benchmark(config)
    assert [(r.side, r.mbs, r.status) for r in report.results] == [
        (ours, 1, "ok"), (ours, 2, "ok"), ("hf", 1, "ok"), ("hf", 2, "ok")]
    for r in report.results:
        for value in (r.step_ms_median, r.tokens_per_s, r.tflops, r.mfu, r.peak_memory_gib, r.loss):
            assert math.isfinite(value) and value > 0, r
    by_key = {(r.side, r.mbs): r for r in report.results}
    for mbs in (1, 2):
        loss, hf = by_key[(ours, mbs)].loss, by_key[("hf", mbs)].loss
        assert abs(loss - hf) <= BF16_LOSS_REL * abs(hf), (mbs, loss, hf)
    assert report.summary[f"speedup_{ours}_over_hf"] > 0
    assert report.settings[ours]["backend"] == {"ours": "torch", "te": "te"}[ours]
    assert set(report.profiles) == {ours, "hf"}
    for suffix, column in (("", "Self CUDA"), ("_by_shape", "Input Shapes")):
        assert column in (tmp_path / f"{ours}_top_cuda{suffix}.txt").read_text(), suffix
