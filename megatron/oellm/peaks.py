"""Nominal peak tensor throughput per GPU, and model-FLOP utilisation (MFU) against it.

Peaks are NVIDIA's dense (no 2:4 sparsity) datasheet numbers in TFLOP/s (half the datasheet's sparsity figure where
it gives only that: the PCIe and NVL cards run lower clocks and power than the SXM modules). They are nominal: the
Jupiter GH200s run power-capped at 680 W for the whole superchip, Grace CPU and memory included (rated 900 W), which
lowers the clock the GPU sustains under load, yet MFU is still quoted against the nominal 989 TFLOP/s so that
numbers from different machines stay comparable. Pure Python.
"""

from __future__ import annotations

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
    fp8_tflops: float
    """Dense FP8 tensor-core peak, TFLOP/s."""
    note: str = ""
    """What the nominal peak does not reflect on our machines."""

    def tflops(self, precision: Precision) -> float:
        """Peak TFLOP/s at ``precision``; any other precision raises (it returned the FP8 peak, so ``"fp16"`` or
        ``"BF16"`` halved the MFU)."""
        peaks = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops}
        if precision not in peaks:
            raise ValueError(f"unknown precision {precision!r} for the {self.name} peak; known: {', '.join(peaks)}")
        return peaks[precision]


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
    )
}
"""Known GPUs by name."""


def peak_tflops(gpu: str, precision: Precision = "bf16") -> float:
    """Nominal dense peak TFLOP/s of ``gpu`` at ``precision``; unknown names raise naming the known ones."""
    if gpu not in GPU_PEAKS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPU_PEAKS)} (or give the peak in TFLOP/s)")
    return GPU_PEAKS[gpu].tflops(precision)


def mfu(tflops_per_gpu: float, peak: float) -> float:
    """Model-FLOP utilisation: achieved TFLOP/s per GPU over the peak TFLOP/s (a fraction, not a percentage)."""
    if not 0 < peak < math.inf:  # NaN and inf pass a "<= 0" test and print as an MFU of nan% or 0.0%
        raise ValueError(f"peak TFLOP/s must be a positive, finite number, got {peak}")
    return tflops_per_gpu / peak
