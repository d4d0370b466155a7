"""``oellm table`` rates an FP8 run's MFU against the dense BF16 peak, as the reports do, while ``oellm flops
--precision fp8`` divides by the dense FP8 peak: one run got two MFUs without a word. The footnote now says so when a
row is an FP8 run, naming the FP8 peak of the table's GPU. Generated logs, fresh random throughputs."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.peaks import GPU_PEAKS
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

FP8 = {"fp8": "hybrid", "fp8_recipe": "blockwise"}


def _log(tmp_path, name: str, overrides: dict) -> str:
    """A generated 8-node log of the strong-scaling recipe with ``overrides`` in its arguments; its path."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **overrides})
    step_ms, tflops = round(random.uniform(60_000.0, 90_000.0), 1), round(random.uniform(100.0, 180.0), 1)
    path = tmp_path / name
    path.write_text(megatron_log(args, [step_ms] * 10, [tflops] * 10))
    return str(path)


def _footnote(capsys, *argv: str) -> str:
    """The footnote of ``oellm table ARGV``."""
    assert main(["table", *argv]) == 0
    return capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("gpu", [None, "gh200", "h100-pcie"])
def test_the_footnote_names_the_peak_of_the_fp8_rows(tmp_path, capsys, gpu):
    logs = [_log(tmp_path, "a_bf16.out", {}), _log(tmp_path, "b_fp8.out", FP8)]
    footnote = _footnote(capsys, *logs, *(["--gpu", gpu] if gpu else []))
    peak = GPU_PEAKS[gpu or "h100-sxm"]
    assert (f" The MFU of the FP8 run (row 2) is against the dense BF16 peak too, as the reports rate it; `oellm flops "
            f"--gpu {peak.name} --precision fp8` divides by the dense FP8 peak, {peak.fp8_tflops:g} TFLOP/s, instead: "
            f"for the same run its MFU is {peak.bf16_tflops / peak.fp8_tflops:.2f} x this one.") in footnote


def test_several_fp8_rows_are_named_and_a_given_peak_is_kept(tmp_path, capsys):
    logs = [_log(tmp_path, f"fp8_{k}.out", FP8) for k in range(2)]
    peak = random.randint(500, 1500)
    footnote = _footnote(capsys, *logs, "--peak-tflops", str(peak))
    assert footnote.endswith(f" The MFU of the FP8 runs (rows 1, 2) is against the same {peak} TFLOP/s; `oellm flops "
                             "--precision fp8` divides by the GPU's dense FP8 peak instead.")


def test_a_table_without_fp8_rows_says_nothing_of_fp8_peaks(tmp_path, capsys):
    footnote = _footnote(capsys, _log(tmp_path, "bf16.out", {}))
    assert "FP8 run" not in footnote and "--precision fp8" not in footnote
