"""The [oellm] throughput line: arithmetic against a hand computation (and a ValueError, not a ZeroDivisionError, for
a time or GPU count that gives no throughput), format/parse round trip, hook guard."""

import random

import pytest
import torch

from megatron.oellm.training.throughput import (
    Throughput,
    check_hook_point,
    device_peak_tflops,
    measure,
)
from tests.unit_tests.training.throughput_lines import parse_throughput_line


def test_measure_matches_hand_computation():
    rng = random.Random(random.random())
    tokens, elapsed, gpus = rng.randrange(10**5, 10**8), rng.uniform(0.5, 50), rng.choice([1, 4, 8])
    flops, peak = rng.uniform(1e8, 1e11), rng.uniform(100, 1000)
    got = measure(17, tokens, elapsed, gpus, flops, peak)
    per_gpu = tokens / gpus / elapsed
    assert got.tokens_per_s_per_gpu == pytest.approx(per_gpu)
    assert got.tflops_per_gpu == pytest.approx(per_gpu * flops / 1e12)
    assert got.mfu == pytest.approx(per_gpu * flops / 1e12 / peak)


@pytest.mark.parametrize("elapsed_s, num_gpus", [
    (0.0, 4), (-random.uniform(0.1, 100), 4), (float("nan"), 4), (float("inf"), 4),
    (random.uniform(0.1, 100), 0), (random.uniform(0.1, 100), -random.randint(1, 8))])
def test_no_positive_finite_time_or_gpu_count_is_a_value_error(elapsed_s, num_gpus):
    with pytest.raises(ValueError, match="elapsed time and GPU count must be positive"):
        measure(10, random.randrange(1, 10**8), elapsed_s, num_gpus, random.uniform(1e8, 1e11), 989.0)


def test_format_parse_round_trip():
    line = Throughput(30, 12345.67, 123.456, 0.2468).format()
    parsed = parse_throughput_line(" noise " + line)
    assert parsed == Throughput(30, 12345.7, 123.46, pytest.approx(0.2468))
    assert parse_throughput_line(Throughput(3, 1.0, 2.0, None).format()).mfu is None
    assert parse_throughput_line(" iteration 30/ 100 | lm loss: 1.0") is None


def test_device_peaks():
    assert device_peak_tflops("NVIDIA H200") == 989.0
    assert device_peak_tflops("NVIDIA GH200 480GB", "fp8") == 1979.0
    assert device_peak_tflops("NVIDIA B200") is None
    assert device_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0


@pytest.mark.parametrize("device_name, peak", [("NVIDIA H100 PCIe", 756.5), ("NVIDIA H100 NVL", 835.5),
                                               ("NVIDIA H200 NVL", 835.5)])
def test_pcie_and_nvl_cards_get_their_own_lower_peaks(device_name, peak):
    """Their names contain "H100" / "H200": matched by that alone they took the SXM peak and understated MFU."""
    assert device_peak_tflops(device_name) == peak


def test_hook_guard_accepts_megatron_and_rejects_other_signatures():
    from megatron.training import training

    check_hook_point(training.training_log)

    def other_release(loss_dict, step):
        return None

    with pytest.raises(RuntimeError, match="training-log-hook"):
        check_hook_point(other_release)


@pytest.mark.parametrize("gtp_weight_remat_size", [1, 2])
def test_wrapper_counts_each_intervals_tokens_against_megatrons_interval_timer(gtp_weight_remat_size, monkeypatch):
    """Megatron logs iteration 1 without resetting its interval timer, then every log_interval iterations: the
    [oellm] line must count the tokens of exactly the iterations the timer covered, with megatron's global batch
    (its data_parallel_size leaves out the GTP weight-rematerialisation axis, whose ranks each draw micro-batches:
    the line showed half the tokens/s at --tensor-parallel-num-weight-shards 2 x TP)."""
    from types import SimpleNamespace

    import megatron.core.num_microbatches_calculator as microbatches
    import megatron.training
    import megatron.training.utils
    from megatron.training import training

    from megatron.oellm.training.throughput import ThroughputBasis, install_throughput_logging

    megatron_calls = []

    def megatron_training_log(loss_dict, iteration, is_first_iteration=False):
        megatron_calls.append(iteration)

    rng = random.Random(random.random())
    args = SimpleNamespace(micro_batch_size=rng.choice([1, 2]), data_parallel_size=rng.choice([1, 4]),
                           seq_length=rng.choice([128, 4096]), log_interval=5, world_size=8,
                           gtp_weight_remat_size=gtp_weight_remat_size)
    num_microbatches = rng.randrange(1, 9)
    seconds = {"interval": 0.0}

    class IntervalTimer:
        def elapsed(self, barrier, reset):
            assert reset is False  # megatron's own training_log reads and resets it afterwards
            return seconds["interval"]

    printed = []
    monkeypatch.setattr(training, "training_log", megatron_training_log)
    monkeypatch.setattr(megatron.training, "get_args", lambda: args)
    monkeypatch.setattr(megatron.training, "get_timers", lambda: (lambda name: IntervalTimer()))
    monkeypatch.setattr(microbatches, "get_num_microbatches", lambda: num_microbatches)
    monkeypatch.setattr(megatron.training.utils, "print_rank_last", printed.append)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA H100 80GB HBM3")
    basis = ThroughputBasis(flops_per_token=2e9, seq_length=args.seq_length, peak_tflops=989.0)
    install_throughput_logging(basis)
    install_throughput_logging(basis)  # idempotent: one wrapper

    tokens_per_iteration = (args.micro_batch_size * args.data_parallel_size * gtp_weight_remat_size
                            * num_microbatches * args.seq_length)
    for iteration in range(1, 11):
        seconds["interval"] = 1.5 * (iteration if iteration <= 5 else iteration - 5)
        training.training_log({}, iteration, is_first_iteration=iteration == 1)
    assert megatron_calls == list(range(1, 11))
    assert printed[0].startswith("[oellm] throughput basis: 2.0000 GFLOP/token")
    lines = [parse_throughput_line(line) for line in printed[1:]]
    assert [line.iteration for line in lines] == [1, 5, 10]
    # iteration 1: 1 iteration in 1.5 s; 1-5: 5 iterations in 7.5 s (timer not reset at 1); 6-10: 5 in 7.5 s
    expected = tokens_per_iteration / 1.5 / args.world_size
    for line in lines:
        # the line prints tokens/s with 1 decimal and TFLOP/s with 2
        assert line.tokens_per_s_per_gpu == pytest.approx(expected, rel=1e-3, abs=0.06)
        assert line.tflops_per_gpu == pytest.approx(expected * 2e9 / 1e12, rel=1e-3, abs=0.006)


@pytest.mark.parametrize("peak", [float("nan"), float("inf"), 0.0, -1.0])
def test_mfu_refuses_a_peak_that_is_no_positive_finite_number(peak):
    """`oellm flops --peak-tflops nan` printed "MFU nan% of nan TFLOP/s" (inf: 0.0%) instead of an error."""
    from megatron.oellm.peaks import mfu

    with pytest.raises(ValueError, match="positive, finite"):
        mfu(random.uniform(50, 500), peak)
    tflops, good = random.uniform(50, 500), random.uniform(100, 2000)
    assert mfu(tflops, good) == pytest.approx(tflops / good)
