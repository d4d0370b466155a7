"""Mutation audit (round 8) of ``megatron.oellm.training.throughput``: which peak a CUDA device name gets, the
``[oellm]`` line's rounding and refusals, and the wrapper's transparency to megatron's training loop."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from megatron.oellm.training.throughput import (
    Throughput,
    check_hook_point,
    device_peak_name,
    device_peak_tflops,
    measure,
)
from tests.unit_tests.training.throughput_lines import parse_throughput_line

# torch.cuda.get_device_name() of the GPUs we run on -> (peak name, dense BF16, dense FP8 TFLOP/s of its datasheet)
CUDA_NAMES = {
    "NVIDIA GH200 480GB": ("gh200", 989.0, 1979.0),
    "NVIDIA GH200 144G HBM3e": ("gh200", 989.0, 1979.0),
    "NVIDIA H200": ("h200-sxm", 989.0, 1979.0),
    "NVIDIA H200 NVL": ("h200-nvl", 835.5, 1670.5),
    "NVIDIA H100 80GB HBM3": ("h100-sxm", 989.0, 1979.0),
    "NVIDIA H100 PCIe": ("h100-pcie", 756.5, 1513.0),
    "NVIDIA H100 NVL": ("h100-nvl", 835.5, 1670.5),
}


@pytest.mark.parametrize("device_name", sorted(CUDA_NAMES))
def test_cuda_device_names_map_to_their_own_gpu_and_peaks(device_name):
    """A GH200's name contains "H200", an H100 PCIe's "H100": each must still get its own entry (the GH200's carries
    the power-cap note) and its own peak at both precisions."""
    name, bf16, fp8 = CUDA_NAMES[device_name]
    assert device_peak_name(device_name) == name
    assert device_peak_tflops(device_name) == bf16
    assert device_peak_tflops(device_name, "fp8") == fp8


@pytest.mark.parametrize("device_name", ["NVIDIA H800", "NVIDIA B200", "Tesla V100-SXM2-32GB"])
def test_unknown_cuda_device_has_no_peak_and_its_line_says_na(device_name):
    """A GPU without a known peak prints ``MFU: n/a`` rather than an MFU against some other GPU's peak."""
    assert device_peak_name(device_name) is None and device_peak_tflops(device_name) is None
    tokens, elapsed = random.randrange(10**4, 10**8), random.uniform(0.5, 60)
    line = measure(random.randrange(1, 10**5), tokens, elapsed, 8, random.uniform(1e8, 1e11), None)
    assert line.mfu is None and line.format().endswith("| MFU: n/a")
    assert parse_throughput_line(line.format()).mfu is None


def test_line_rounds_tokens_to_one_decimal_tflops_to_two_and_mfu_to_hundredths_of_a_percent():
    """The printed line is what users copy into tables: tokens/s with 1 decimal, TFLOP/s with 2, MFU in percent with
    2; parsing it back gives those rounded values (MFU as a fraction)."""
    tokens, tflops, fraction = random.uniform(1e3, 1e5), random.uniform(10, 900), random.uniform(0.01, 0.9)
    iteration = random.randrange(1, 10**6)
    text = Throughput(iteration, tokens, tflops, fraction).format()
    assert text == (f"[oellm] iteration {iteration} | tokens/s/GPU: {round(tokens, 1):.1f} | "
                    f"TFLOP/s/GPU: {round(tflops, 2):.2f} | MFU: {round(100 * fraction, 2):.2f}%")
    parsed = parse_throughput_line(text)
    assert parsed.iteration == iteration
    assert parsed.tokens_per_s_per_gpu == pytest.approx(tokens, abs=0.051)
    assert parsed.tflops_per_gpu == pytest.approx(tflops, abs=0.0051)
    assert parsed.mfu == pytest.approx(fraction, abs=0.000051)


@pytest.mark.parametrize("flops_per_token", [math.inf, math.nan])
def test_non_finite_flops_per_token_is_refused_not_printed(flops_per_token):
    """A ``nan`` or ``inf`` TFLOP/s would print a line no reader parses: refused, naming the FLOPs per token."""
    with pytest.raises(ValueError, match="TFLOP/s per GPU is not finite"):
        measure(10, random.randrange(1, 10**8), random.uniform(0.1, 10), 8, flops_per_token, 989.0)


def test_wrapper_returns_megatrons_report_memory_flag(monkeypatch):
    """megatron's ``train`` loop feeds ``training_log``'s return value (its report-memory flag) into the next call:
    the wrapper must hand it back unchanged, at log iterations and others, or the memory report after the optimizer
    state exists is lost."""
    import megatron.core.num_microbatches_calculator as microbatches
    import megatron.training
    import megatron.training.utils
    from megatron.training import training

    from megatron.oellm.training.throughput import ThroughputBasis, install_throughput_logging

    returned = {}

    def megatron_training_log(loss_dict, iteration, report_memory_flag=True, is_first_iteration=False):
        returned[iteration] = random.choice([True, False, object()])
        return returned[iteration]

    args = SimpleNamespace(micro_batch_size=1, data_parallel_size=random.choice([1, 4]), gtp_weight_remat_size=1,
                           seq_length=random.choice([128, 4096]), log_interval=random.randint(2, 4), world_size=8)
    printed = []
    monkeypatch.setattr(training, "training_log", megatron_training_log)
    monkeypatch.setattr(megatron.training, "get_args", lambda: args)
    monkeypatch.setattr(megatron.training, "get_timers",
                        lambda: (lambda name: SimpleNamespace(elapsed=lambda barrier, reset: 1.25)))
    monkeypatch.setattr(microbatches, "get_num_microbatches", lambda: random.randint(1, 8))
    monkeypatch.setattr(megatron.training.utils, "print_rank_last", printed.append)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA H100 80GB HBM3")
    install_throughput_logging(ThroughputBasis(random.uniform(1e8, 1e10), args.seq_length, 989.0))
    for iteration in range(1, 10):
        flag = training.training_log({}, iteration, report_memory_flag=True, is_first_iteration=iteration == 1)
        assert flag is returned[iteration]
    assert len(printed) == 2 + 9 // args.log_interval  # the wrapper did run: the basis line, one per log iteration


@pytest.mark.parametrize("peak", [math.nan, math.inf, 0.0, -989.0])
def test_measure_refuses_a_peak_that_is_no_positive_finite_number(peak):
    """The line's MFU goes through the peak check: a ``nan`` peak printed ``MFU: nan%`` (no reader parses it), an
    ``inf`` one 0.00%, a zero one a ZeroDivisionError rather than a ValueError naming the peak."""
    with pytest.raises(ValueError, match="peak TFLOP/s must be a positive, finite number"):
        measure(10, random.randrange(1, 10**8), random.uniform(0.1, 10), 8, random.uniform(1e8, 1e11), peak)


def test_hook_guard_refuses_a_training_log_without_is_first_iteration():
    """The wrapper reads ``is_first_iteration`` to restart its token count and print iteration 1's line: a release
    whose ``training_log`` lacks it must be refused by name, not silently mis-counted."""

    def release_without_first_flag(loss_dict, total_loss_dict, learning_rate, iteration, report_memory_flag):
        return report_memory_flag

    with pytest.raises(RuntimeError, match=r"no parameter\(s\) \['is_first_iteration'\]"):
        check_hook_point(release_without_first_flag)
