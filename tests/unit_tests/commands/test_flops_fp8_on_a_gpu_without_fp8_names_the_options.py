"""``oellm flops --gpu a100 --precision fp8``: the A100 has no FP8 peak, and the refusal names the two options that
give an MFU (``--precision bf16``, ``--peak-tflops P``); it said "quote its bf16 peak, or give the peak in TFLOP/s"."""

from __future__ import annotations

import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import list_card_names
from megatron.oellm.peaks import GPU_PEAKS


def _flops(gpu: str, *extra: str) -> list[str]:
    return ["flops", random.choice(list_card_names()), "--seq-length", str(random.choice([2048, 4096, 8192])),
            "--tokens-per-second-per-gpu", str(random.randrange(100, 20000)), "--gpu", gpu, *extra]


def test_fp8_on_a_gpu_without_fp8_names_the_options(capsys: pytest.CaptureFixture) -> None:
    gpu = random.choice([name for name, peak in GPU_PEAKS.items() if peak.fp8_tflops is None])
    capsys.readouterr()
    assert cli.main(_flops(gpu, "--precision", "fp8")) == 2
    error = capsys.readouterr().err
    assert f"--gpu {gpu} --precision fp8" in error and "pass --precision bf16" in error, error
    assert "--peak-tflops P" in error and f"{GPU_PEAKS[gpu].bf16_tflops:g} TFLOP/s" in error, error


@pytest.mark.parametrize("extra", [["--precision", "bf16"], ["--precision", "fp8", "--peak-tflops", "400"]])
def test_the_named_options_work(extra: list[str], capsys: pytest.CaptureFixture) -> None:
    gpu = random.choice([name for name, peak in GPU_PEAKS.items() if peak.fp8_tflops is None])
    assert cli.main(_flops(gpu, *extra)) == 0
