"""The A100 in the peak table (EuroHPC Leonardo's custom 64 GB SXM module among them): its dense BF16 peak from its
CUDA name, as the training entry and ``oellm bench`` find it, and a clear refusal of an FP8 peak it has none of."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.peaks import GPU_PEAKS, mfu, peak_tflops
from megatron.oellm.training.throughput import device_peak_name, device_peak_tflops

A100_CUDA_NAMES = ("NVIDIA A100-SXM-64GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe",
                   "NVIDIA A100-PCIE-40GB")
"""How CUDA names the A100 modules and cards (the first: Leonardo's booster nodes)."""


@pytest.mark.parametrize("device_name", A100_CUDA_NAMES)
def test_every_a100_is_quoted_against_its_dense_bf16_datasheet_peak(device_name: str) -> None:
    assert device_peak_name(device_name) == "a100"
    assert device_peak_tflops(device_name) == 312.0 == peak_tflops("a100")
    achieved = random.uniform(50.0, 300.0)
    assert mfu(achieved, device_peak_tflops(device_name)) == pytest.approx(achieved / 312.0)


def test_an_fp8_peak_of_the_a100_is_refused_naming_the_way_out() -> None:
    """The A100 has no FP8 tensor cores: an FP8 MFU against any number of the table would be made up."""
    assert GPU_PEAKS["a100"].fp8_tflops is None
    with pytest.raises(ValueError, match="a100 has no FP8 tensor cores.*peak in TFLOP/s"):
        peak_tflops("a100", "fp8")


def test_oellm_flops_takes_the_a100_and_refuses_its_fp8_peak_in_one_line(capsys: pytest.CaptureFixture) -> None:
    argv = ["flops", "qwen3.5-35b-a3b-proxy-4L", "--seq-length", "4096", "--json", "--gpu", "a100",
            "--tokens-per-second-per-gpu", str(random.randint(1000, 20000))]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--precision", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm flops: error: ") and "FP8" in err and len(err.strip().splitlines()) == 1
