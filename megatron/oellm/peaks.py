"""Nominal peak tensor throughput per GPU, and model-FLOP utilisation (MFU) against it.

Peaks are NVIDIA's dense (no 2:4 sparsity) datasheet numbers in TFLOP/s (half the datasheet's sparsity figure where
it gives only that: the PCIe and NVL cards run lower clocks and power than the SXM modules). They are nominal: the
Jupiter GH200s run power-capped at 680 W for the whole superchip, Grace CPU and memory included (rated 900 W), which
lowers the clock the GPU sustains under load, yet MFU is still quoted against the nominal 989 TFLOP/s so that
numbers from different machines stay comparable. The A100 (Ampere) has no FP8 tensor cores, so it has no FP8 peak.
Pure Python.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Literal

Precision = Literal["bf16", "fp8"]


@dataclass(frozen=True)
class GpuPeak:
    """Dense peak tensor throughput of one GPU model."""

    name: str
    """Registry name, e.g. ``h100-sxm``."""
    bf16_tflops: float
    """Dense BF16 tensor-core peak, TFLOP/s."""
    fp8_tflops: float | None
    """Dense FP8 tensor-core peak, TFLOP/s; None for a GPU without FP8 tensor cores."""
    note: str = ""
    """What the nominal peak does not reflect on our machines."""

    def tflops(self, precision: Precision) -> float:
        """Peak TFLOP/s at ``precision``; any other precision raises (it returned the FP8 peak, so ``"fp16"`` or
        ``"BF16"`` halved the MFU)."""
        peaks = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops}
        if precision not in peaks:
            raise ValueError(f"unknown precision {precision!r} for the {self.name} peak; known: {', '.join(peaks)}")
        peak = peaks[precision]
        if peak is None:
            raise ValueError(f"the {self.name} has no {precision.upper()} tensor cores, so no {precision} peak: quote "
                             "its bf16 peak, or give the peak in TFLOP/s")
        return peak


GPU_PEAKS: dict[str, GpuPeak] = {
    peak.name: peak
    for peak in (
        GpuPeak("h100-sxm", 989.0, 1979.0),
        GpuPeak("h100-pcie", 756.5, 1513.0),
        GpuPeak("h100-nvl", 835.5, 1670.5),
        GpuPeak("h200-sxm", 989.0, 1979.0),
        GpuPeak("h200-nvl", 835.5, 1670.5),
        GpuPeak("gh200", 989.0, 1979.0,
                "Jupiter runs GH200 power-capped at 680 W for the whole superchip, Grace CPU included (rated 900 W): "
                "the nominal peak does not reflect the cap"),
        GpuPeak("a100", 312.0, None),
    )
}
"""Known GPUs by name. ``a100``: NVIDIA's A100 datasheet gives BF16 312 TFLOP/s dense (624 with sparsity) alike for
the SXM4 modules and PCIe cards of 40 and 80 GB; EuroHPC Leonardo's custom 64 GB SXM modules are the same GA100 chip and
take the same peak."""


def peak_tflops(gpu: str, precision: Precision = "bf16") -> float:
    """Nominal dense peak TFLOP/s of ``gpu`` at ``precision``; unknown names raise naming the known ones."""
    if gpu not in GPU_PEAKS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPU_PEAKS)} (or give the peak in TFLOP/s)")
    return GPU_PEAKS[gpu].tflops(precision)


def positive_tflops(text: str) -> float:
    """An argparse type for a peak given by hand (``--peak-tflops``, ``--oellm-peak-tflops``): a positive, finite
    TFLOP/s per GPU, refused by the parser otherwise, since an MFU divides by it (0 stopped a run at its first
    ``[oellm]`` line; ``inf``, or a number too large for a float, gives no MFU)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not valid_peak(value):
        raise argparse.ArgumentTypeError(f"the peak must be a positive TFLOP/s per GPU, got {text!r}")
    return value


def valid_peak(value: float) -> bool:
    """Whether ``value`` can be a peak TFLOP/s: positive and finite (NaN and inf pass a "<= 0" test and print as an
    MFU of nan% or 0.0%)."""
    return 0 < value < math.inf


def peak_text(peak: float) -> str:
    """``peak`` TFLOP/s as given, for the lines that name an MFU's peak: every digit the float holds (H100 PCIe's
    756.5, not a rounded 756, nor 6 significant digits of a ``--peak-tflops`` value), without the ``.0`` of an
    integral peak (989)."""
    return repr(float(peak)).removesuffix(".0")


def mfu(tflops_per_gpu: float, peak: float) -> float:
    """Model-FLOP utilisation: achieved TFLOP/s per GPU over the peak TFLOP/s (a fraction, not a percentage)."""
    if not valid_peak(peak):
        raise ValueError(f"peak TFLOP/s must be a positive, finite number, got {peak}")
    return tflops_per_gpu / peak
