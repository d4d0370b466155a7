"""`oellm table` rated every run against 989 TFLOP/s unless --gpu or --peak-tflops said otherwise, while the run's own
``[oellm]`` lines rated it against the peak of the GPU CUDA named (A100 312, H100 PCIe 756.5): the same run had one
MFU in its log and another in the table. The table now reads the log's ``[oellm] throughput basis`` line: the row's
MFU is against the log's peak, the footnote says which, and rows of different peaks (or of a log that names none)
are each named; a peak the user gives wins, with a note where it is not the log's. Generated logs, the basis line
written by the training hook's own :class:`ThroughputBasis`; fresh random throughputs."""

from __future__ import annotations

import csv
import io
import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.peaks import GPU_PEAKS, peak_text
from megatron.oellm.training.throughput import ThroughputBasis
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

DEVICES = {"a100": "NVIDIA A100-SXM-64GB", "h100-pcie": "NVIDIA H100 PCIe", "h100-nvl": "NVIDIA H100 NVL",
           "h100-sxm": "NVIDIA H100 80GB HBM3", "gh200": "NVIDIA GH200 480GB"}
"""A CUDA device name of each GPU the logs are written on."""


def _log(tmp_path, name: str, gpu: str | None, device: str = "", overrides: dict | None = None) -> str:
    """A generated 8-node log of the strong-scaling recipe (``overrides`` in its arguments), with the basis line of a
    run on ``gpu`` (None: no basis line, an older run; ``unknown``: a GPU of no known peak, CUDA name ``device``);
    its path."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **(overrides or {})})
    step_ms, tflops = round(random.uniform(60_000.0, 90_000.0), 1), round(random.uniform(100.0, 180.0), 1)
    text = megatron_log(args, [step_ms] * 10, [tflops] * 10)
    if gpu is not None:
        peak = None if gpu == "unknown" else GPU_PEAKS[gpu].bf16_tflops
        basis = ThroughputBasis(random.uniform(1e10, 3e10), args["seq_length"], peak).format(device or DEVICES[gpu])
        text = text.replace("> building datasets ...\n", f"> building datasets ...\n{basis}\n")
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _table(capsys, *argv: str) -> tuple[list[dict], str, str]:
    """The CSV rows, the markdown footnote and the stderr of ``oellm table ARGV`` (its baseline row 1, so that rows
    of one workload give no note on which is the baseline)."""
    assert main(["table", *argv, "--baseline-row", "1", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main(["table", *argv, "--baseline-row", "1"]) == 0
    out, err = capsys.readouterr()
    return rows, out.splitlines()[-1], err


@pytest.mark.parametrize("gpu", ["a100", "h100-pcie", "h100-nvl", "gh200"])
def test_the_rows_mfu_is_against_the_logs_own_peak(tmp_path, capsys, gpu):
    logs = [_log(tmp_path, f"run{k}.out", gpu) for k in range(random.randint(1, 3))]
    rows, footnote, err = _table(capsys, *logs)
    peak = GPU_PEAKS[gpu]
    for row in rows:
        assert float(row["peak_tflops"]) == peak.bf16_tflops
        assert float(row["mfu_fraction"]) == pytest.approx(float(row["tflops_per_gpu"]) / peak.bf16_tflops)
    gh200_note = f"; {peak.note}" if peak.note else ""
    assert (f"MFU = TFLOP/s/GPU / {peak_text(peak.bf16_tflops)} ({gpu} dense bf16, as the logs' [oellm] lines)"
            f"{gh200_note}. ") in footnote
    assert "note:" not in err


def test_rows_of_different_peaks_each_name_theirs(tmp_path, capsys):
    """Rows of an A100 log, an H100 PCIe log, a log without a basis line and one whose GPU had no known peak."""
    logs = [_log(tmp_path, "a.out", "a100"), _log(tmp_path, "b.out", "h100-pcie"), _log(tmp_path, "c.out", None),
            _log(tmp_path, "d.out", "unknown", f"NVIDIA B{random.randint(100, 300)}")]
    rows, footnote, _ = _table(capsys, *logs)
    peaks = {row["log"]: float(row["peak_tflops"]) for row in rows}
    assert peaks == {logs[0]: 312.0, logs[1]: 756.5, logs[2]: 989.0, logs[3]: 989.0}
    for row in rows:
        assert float(row["mfu_fraction"]) == pytest.approx(float(row["tflops_per_gpu"]) / peaks[row["log"]])
    number = {row["log"]: str(k) for k, row in enumerate(rows, 1)}  # the CSV's rows in the markdown's order
    assert ("MFU = TFLOP/s/GPU / each row's peak: " in footnote
            and f"312 (a100 dense bf16, its log's) for row {number[logs[0]]}" in footnote
            and f"756.5 (h100-pcie dense bf16, its log's) for row {number[logs[1]]}" in footnote
            and f"989 (h100-sxm dense bf16, the default: its log names no peak) for row {number[logs[2]]}" in footnote
            and f"989 (h100-sxm dense bf16, the default: its log computes no MFU) for row {number[logs[3]]}"
            in footnote)


@pytest.mark.parametrize("option", ["--gpu", "--peak-tflops"])
def test_a_given_peak_wins_with_a_note_where_it_is_not_the_logs(tmp_path, capsys, option):
    own, other = _log(tmp_path, "own.out", "a100"), _log(tmp_path, "same.out", "h100-sxm")
    value = "h100-sxm" if option == "--gpu" else "989"
    rows, footnote, err = _table(capsys, own, other, option, value)
    for row in rows:
        assert float(row["peak_tflops"]) == 989.0
        assert float(row["mfu_fraction"]) == pytest.approx(float(row["tflops_per_gpu"]) / 989.0)
    assert "MFU = TFLOP/s/GPU / 989. " in footnote
    given = "--gpu h100-sxm" if option == "--gpu" else "--peak-tflops"
    assert err.splitlines() == [f"note: {own}: its [oellm] lines' MFU is against a100 dense bf16 312 TFLOP/s (its "
                                f"throughput basis line); the table's is against 989 ({given})"]


def test_logs_without_a_basis_line_keep_the_footnote(tmp_path, capsys):
    _, footnote, err = _table(capsys, _log(tmp_path, "old.out", None))
    assert "MFU = TFLOP/s/GPU / 989. " in footnote and "each row's peak" not in footnote and "note:" not in err


def test_fp8_rows_of_different_peaks_are_against_their_rows_peak(tmp_path, capsys):
    """Where the rows' peaks differ, the FP8 sentence names no one peak of the table: each row's, as the reports rate
    it, dense BF16."""
    logs = [_log(tmp_path, "a.out", "a100"),
            _log(tmp_path, "b.out", "h100-pcie", overrides={"fp8": "hybrid", "fp8_recipe": "blockwise"})]
    rows, footnote, _ = _table(capsys, *logs)
    number = next(k for k, row in enumerate(rows, 1) if row["log"] == logs[1])
    assert (f" The MFU of the FP8 run (row {number}) is against its row's peak above, a dense BF16 one, as the reports "
            "rate it; `oellm flops --precision fp8` divides by the GPU's dense FP8 peak instead.") in footnote


def test_logs_of_a_gpu_without_a_known_peak_are_named_not_rated_silently(tmp_path, capsys):
    """Every log's basis line says no MFU could be computed (a GPU of no known peak): the table rates them against
    989 all the same, and says so of each row instead of the bare old footnote."""
    device = f"NVIDIA B{random.randint(100, 300)}"
    logs = [_log(tmp_path, f"run{k}.out", "unknown", device) for k in range(random.randint(1, 3))]
    rows, footnote, _ = _table(capsys, *logs)
    assert {float(row["peak_tflops"]) for row in rows} == {989.0}
    numbers = ", ".join(map(str, range(1, len(logs) + 1)))
    assert (f"each row's peak: 989 (h100-sxm dense bf16, the default: its log computes no MFU) for "
            f"row{'s' if len(logs) > 1 else ''} {numbers}") in footnote


def test_rows_of_different_peaks_keep_the_gh200_power_cap_note(tmp_path, capsys):
    """A GH200 log beside an older one: the per-row footnote keeps what the single-peak one says of the GH200."""
    logs = [_log(tmp_path, "a.out", "gh200"), _log(tmp_path, "b.out", None)]
    _, footnote, _ = _table(capsys, *logs)
    assert "each row's peak: " in footnote and f"; {GPU_PEAKS['gh200'].note}" in footnote


def test_an_fp8_run_rated_against_a_gpu_without_fp8_gets_a_sentence_not_a_traceback(tmp_path, capsys):
    """``--gpu a100`` (no FP8 peak) on an FP8 run's log: the footnote says its MFU is against the A100's BF16 peak."""
    log = _log(tmp_path, "fp8.out", random.choice(["a100", None]), overrides={"fp8": "hybrid", "fp8_recipe": "blockwise"})
    _, footnote, _ = _table(capsys, log, "--gpu", "a100")
    assert "is against the same 312 TFLOP/s, the a100's dense BF16 peak, as the reports rate it." in footnote


def test_a_peak_written_with_a_negative_exponent_is_read_back() -> None:
    """``--oellm-peak-tflops 1e-5`` prints ``1e-05``; the table reads that peak, not none."""
    from megatron.oellm.training.throughput import parse_basis

    peak = random.choice([1e-5, 2.5e-7])
    line = ThroughputBasis(2e10, 4096, peak, True).format("NVIDIA H100 80GB HBM3")
    assert parse_basis(line).tflops == peak
