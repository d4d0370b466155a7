"""A peak is printed as given wherever an MFU names it: ``oellm flops`` rounded it to a whole number (H100 PCIe's
756.5 printed as 756), ``oellm bench`` likewise, and ``oellm table`` kept 6 significant digits of a
``--peak-tflops``. Integral peaks print without a ``.0``."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

FLOPS = ["flops", "qwen3-30b-a3b", "--seq-length", "4096"]


def seven_digit_peak() -> str:
    """A fresh peak in TFLOP/s with 7 significant digits, its last one not 0: more than ``:g`` prints."""
    return f"{random.randint(1000, 2999)}.{random.randint(0, 99):02d}{random.randint(1, 9)}"


def mfu_line(capsys: pytest.CaptureFixture[str], *options: str) -> str:
    """The MFU line (the last) of ``oellm flops qwen3-30b-a3b --seq-length 4096 OPTIONS``."""
    assert main([*FLOPS, *options]) == 0
    return capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize(("gpu", "precision", "printed"), [("h100-pcie", "bf16", "756.5"), ("h100-nvl", "bf16", "835.5"),
                                                          ("h200-nvl", "fp8", "1670.5"), ("h100-sxm", "bf16", "989"),
                                                          ("a100", "bf16", "312")])
def test_oellm_flops_names_a_gpus_peak_as_given(gpu, precision, printed, capsys):
    line = mfu_line(capsys, "--tokens-per-second-per-gpu", "7519", "--gpu", gpu, "--precision", precision)
    assert line.endswith(f"% of {printed} TFLOP/s")


def test_oellm_flops_keeps_every_digit_of_a_peak_given_by_hand(capsys):
    peak = seven_digit_peak()
    line = mfu_line(capsys, "--tokens-per-second-per-gpu", f"{random.randint(1000, 9000)}", "--peak-tflops", peak)
    assert line.endswith(f"% of {peak} TFLOP/s")


def test_oellm_table_keeps_every_digit_of_a_peak_given_by_hand(tmp_path, capsys):
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "8n.out"
    step_ms, tflops = round(random.uniform(60_000.0, 90_000.0), 1), round(random.uniform(100.0, 180.0), 1)
    log.write_text(megatron_log(args, [step_ms] * 10, [tflops] * 10))
    peak = seven_digit_peak()
    assert main(["table", str(log), "--peak-tflops", peak]) == 0
    assert f"MFU = TFLOP/s/GPU / {peak}. " in capsys.readouterr().out.splitlines()[-1]
