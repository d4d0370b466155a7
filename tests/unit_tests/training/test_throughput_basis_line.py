"""The ``[oellm]`` throughput lines' MFU peak is picked from the CUDA device name (A100 312, H100 PCIe 756.5, ...),
yet the log never said which peak nor which FLOP count its lines were computed on, so `oellm table` rated the same
run against 989 and printed another MFU. The entry now hands the hook a :class:`ThroughputBasis`, which it prints
once, through ``print_rank_last`` as its other lines, before megatron's first iteration line; `oellm table` reads it
back with :func:`parse_basis`. Megatron's training_log, args, timers and printing stood in; fresh random inputs."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from megatron.oellm.peaks import GPU_PEAKS, peak_text
from megatron.oellm.training.throughput import (
    LoggedPeak,
    ThroughputBasis,
    device_peak_name,
    device_peak_tflops,
    install_throughput_logging,
    parse_basis,
)
from tests.unit_tests.peak_devices import KNOWN_DEVICES
from tests.unit_tests.training.entry_helpers import entry_up_to_throughput_hook, tiny_moe_run


def _hooked_log(monkeypatch: pytest.MonkeyPatch, basis: ThroughputBasis, device: str) -> list[tuple[str, str]]:
    """(who printed, line) of ten iterations at log interval 5 through the installed hook on the GPU CUDA calls
    ``device``: ``megatron`` for megatron's own line, ``last`` for the hook's ``print_rank_last``."""
    import megatron.core.num_microbatches_calculator as microbatches
    import megatron.training
    import megatron.training.utils
    from megatron.training import training

    printed: list[tuple[str, str]] = []
    args = SimpleNamespace(micro_batch_size=1, data_parallel_size=random.choice([1, 4]), gtp_weight_remat_size=1,
                           seq_length=random.choice([1024, 4096]), log_interval=5, world_size=8)

    def megatron_training_log(loss_dict, iteration, is_first_iteration=False):
        if is_first_iteration or iteration % args.log_interval == 0:
            printed.append(("megatron", f"iteration {iteration}"))

    class IntervalTimer:
        def elapsed(self, barrier, reset):
            return random.uniform(1.0, 2.0)

    monkeypatch.setattr(training, "training_log", megatron_training_log)
    monkeypatch.setattr(megatron.training, "get_args", lambda: args)
    monkeypatch.setattr(megatron.training, "get_timers", lambda: (lambda name: IntervalTimer()))
    monkeypatch.setattr(microbatches, "get_num_microbatches", lambda: 2)
    monkeypatch.setattr(megatron.training.utils, "print_rank_last", lambda line: printed.append(("last", line)))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: device)
    install_throughput_logging(basis)
    for iteration in range(1, 11):
        training.training_log({}, iteration, is_first_iteration=iteration == 1)
    return printed


def _basis_lines(printed: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
    """(position, who, line) of the printed basis lines."""
    return [(at, who, line) for at, (who, line) in enumerate(printed) if "throughput basis" in line]


@pytest.mark.parametrize("device", KNOWN_DEVICES)
def test_the_basis_line_comes_once_from_the_last_rank_before_the_first_line(monkeypatch, device):
    flops, seq = random.uniform(1e8, 1e11), random.choice([1024, 4096, 8192])
    basis = ThroughputBasis(flops, seq, device_peak_tflops(device))
    printed = _hooked_log(monkeypatch, basis, device)
    [(at, who, line)] = _basis_lines(printed)
    assert (at, who) == (0, "last")  # before megatron's first iteration line, on the rank of the [oellm] lines
    gpu = device_peak_name(device)
    assert line == (f"[oellm] throughput basis: {flops / 1e9:.4f} GFLOP/token (oellm FLOP count, training, seq {seq})"
                    f" | MFU vs {gpu} dense bf16 {peak_text(GPU_PEAKS[gpu].bf16_tflops)} TFLOP/s on {device!r}, FP8 "
                    "runs too")
    assert parse_basis(line) == LoggedPeak(GPU_PEAKS[gpu].bf16_tflops, gpu)
    assert sum(line.startswith("[oellm] iteration") for _, line in printed) == 3  # iterations 1, 5, 10 as before


def test_an_unknown_gpu_says_no_mfu_is_computed(monkeypatch):
    device = f"NVIDIA B{random.randint(100, 300)}"
    printed = _hooked_log(monkeypatch, ThroughputBasis(random.uniform(1e8, 1e11), 4096, None), device)
    [(_, _, line)] = _basis_lines(printed)
    assert line.endswith(f"| MFU n/a: no dense bf16 peak known for {device!r}; --oellm-peak-tflops TFLOPS gives it")
    assert parse_basis(line) == LoggedPeak(None, None)


def test_a_given_peak_is_named_as_given(monkeypatch):
    peak = round(random.uniform(100.0, 2000.0), 1)
    printed = _hooked_log(monkeypatch, ThroughputBasis(2e9, 4096, peak, peak_given=True), random.choice(KNOWN_DEVICES))
    [(_, _, line)] = _basis_lines(printed)
    assert f"| MFU vs {peak_text(peak)} TFLOP/s (--oellm-peak-tflops) on " in line
    assert parse_basis(line) == LoggedPeak(peak, None)


@pytest.mark.parametrize("line", ["[oellm] iteration 5 | tokens/s/GPU: 1.0 | TFLOP/s/GPU: 2.00 | MFU: 0.20%",
                                  "[oellm] throughput basis: 2.0000 GFLOP/token (oellm FLOP count, training, seq 4096)"
                                  " | MFU vs b300 dense bf16 2250 TFLOP/s on 'NVIDIA B300', FP8 runs too",
                                  "[oellm] throughput basis: 2.0000 GFLOP/token | MFU vs 0 TFLOP/s "
                                  "(--oellm-peak-tflops)"])
def test_parse_basis_takes_no_other_line(line):
    """An iteration line, a GPU name the peak table lacks, a peak that is no positive number: no peak."""
    assert parse_basis(line) is None


def test_the_entry_hands_the_hook_the_runs_basis(monkeypatch):
    """The entry gives :func:`install_throughput_logging` the basis of the FLOP count and peak it computed, at the
    run's sequence length, the peak marked as given where ``--oellm-peak-tflops`` set it."""
    import megatron.training

    from megatron.oellm.training import throughput

    entry = entry_up_to_throughput_hook(monkeypatch)
    flops, peak = random.uniform(1e8, 1e11), random.choice([None, 312.0, 989.0])
    monkeypatch.setattr(entry, "flops_and_peak", lambda *_args: (flops, peak))
    installed = []
    monkeypatch.setattr(throughput, "install_throughput_logging", lambda *args: installed.append(args))
    monkeypatch.setattr(megatron.training, "pretrain", lambda *_args, **_kwargs: None)
    given = random.choice([[], ["--oellm-peak-tflops", "500"]])
    run = [*tiny_moe_run(), *given]
    assert entry.main(run) == 0
    [(basis,)] = installed
    assert basis == ThroughputBasis(flops, int(run[run.index("--seq-length") + 1]), peak, bool(given))
