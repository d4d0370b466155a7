"""The [oellm] throughput line: arithmetic against a hand computation, format/parse round trip, hook guard."""

import random

import pytest

from megatron.oellm.training.throughput import (
    Throughput,
    check_hook_point,
    device_peak_tflops,
    measure,
    parse_throughput_line,
)


def test_measure_matches_hand_computation():
    rng = random.Random()
    tokens, elapsed, gpus = rng.randrange(10**5, 10**8), rng.uniform(0.5, 50), rng.choice([1, 4, 8])
    flops, peak = rng.uniform(1e8, 1e11), rng.uniform(100, 1000)
    got = measure(17, tokens, elapsed, gpus, flops, peak)
    per_gpu = tokens / gpus / elapsed
    assert got.tokens_per_s_per_gpu == pytest.approx(per_gpu)
    assert got.tflops_per_gpu == pytest.approx(per_gpu * flops / 1e12)
    assert got.mfu == pytest.approx(per_gpu * flops / 1e12 / peak)


def test_format_parse_round_trip():
    line = Throughput(30, 12345.67, 123.456, 0.2468).format()
    parsed = parse_throughput_line(" noise " + line)
    assert parsed == Throughput(30, 12345.7, 123.46, pytest.approx(0.2468))
    assert parse_throughput_line(Throughput(3, 1.0, 2.0, None).format()).mfu is None
    assert parse_throughput_line(" iteration 30/ 100 | lm loss: 1.0") is None


def test_device_peaks():
    assert device_peak_tflops("NVIDIA H200") == 989.0
    assert device_peak_tflops("NVIDIA GH200 480GB", "fp8") == 1979.0
    assert device_peak_tflops("NVIDIA A100-SXM4-80GB") is None


def test_hook_guard_accepts_megatron_and_rejects_other_signatures():
    from megatron.training import training

    check_hook_point(training.training_log)

    def other_release(loss_dict, step):
        return None

    with pytest.raises(RuntimeError, match="training-log-hook"):
        check_hook_point(other_release)
