"""The sixteenth mutation audit's tests of peaks printed as given (:func:`~megatron.oellm.peaks.peak_text`): a peak
whose digits end in 0 keeps them (1000, not 1), and every line that names an MFU's peak prints it so: ``oellm bench``'s
``--peak-tflops`` header, ``oellm table``'s FP8 footnote (the NVL cards' 1670.5) and its implausible-MFU status, and
the default peak in ``oellm table --help``."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from megatron.oellm.cli import main
from megatron.oellm.commands import bench
from megatron.oellm.peaks import peak_text
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import megatron_args, megatron_log


def fractional_peak(low: int, high: int) -> str:
    """A fresh peak in TFLOP/s between ``low`` and ``high`` with 3 decimals, its last one not 0."""
    return f"{random.randint(low, high)}.{random.randint(0, 99):02d}{random.randint(1, 9)}"


@pytest.mark.parametrize(("peak", "printed"), [(1000.0, "1000"), (2000, "2000"), (250.0, "250"), (100.5, "100.5"),
                                               (1670.5, "1670.5"), (0.5, "0.5")])
def test_a_peak_keeps_its_trailing_zeros_and_drops_only_a_point_zero(peak: float, printed: str) -> None:
    assert peak_text(peak) == printed


def test_a_peak_given_to_bench_is_printed_as_given() -> None:
    peak = fractional_peak(1000, 2999)
    report = SimpleNamespace(config={"peak_tflops": float(peak), "gpu": "h100-sxm"}, peak_tflops=float(peak))
    assert bench.mfu_basis(report) == f"MFU vs {peak} TFLOP/s (--peak-tflops)"


def _fp8_log(tmp_path) -> str:
    """A generated 8-node FP8 log of the strong-scaling recipe, fresh random times; its path."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "fp8": "hybrid",
                                                            "fp8_recipe": "blockwise"})
    step_ms, tflops = round(random.uniform(60_000.0, 90_000.0), 1), round(random.uniform(100.0, 180.0), 1)
    path = tmp_path / "fp8.out"
    path.write_text(megatron_log(args, [step_ms] * 10, [tflops] * 10))
    return str(path)


@pytest.mark.parametrize("gpu", ["h100-nvl", "h200-nvl"])
def test_the_fp8_footnote_names_a_fractional_fp8_peak_as_given(gpu: str, tmp_path, capsys) -> None:
    assert main(["table", _fp8_log(tmp_path), "--gpu", gpu]) == 0
    assert "divides by the dense FP8 peak, 1670.5 TFLOP/s, instead" in capsys.readouterr().out.splitlines()[-1]


def test_the_fp8_footnote_names_a_fractional_peak_given_by_hand_as_given(tmp_path, capsys) -> None:
    peak = fractional_peak(500, 1500)
    assert main(["table", _fp8_log(tmp_path), "--peak-tflops", peak]) == 0
    assert f"is against the same {peak} TFLOP/s;" in capsys.readouterr().out.splitlines()[-1]


def test_an_implausible_mfu_names_a_fractional_peak_as_given() -> None:
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "data_parallel_size": 8})
    text = megatron_log(args, [round(random.uniform(60_000.0, 90_000.0), 1)] * 10, [130.0] * 10)
    peak = fractional_peak(1, 9)  # far below any run's TFLOP/s/GPU: an MFU above 100 %
    row = summarise(parse_log_text(text), Window(), 4, peak_tflops=float(peak))
    assert row.status.startswith("implausible numbers: MFU ") and f"against a peak of {peak}; " in row.status


def test_table_help_names_the_default_peak_as_given(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    assert "throughput basis line, else 989: H100/GH200 BF16)" in " ".join(capsys.readouterr().out.split())
