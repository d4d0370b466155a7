"""``oellm table --format csv`` repeats on every row what the markdown's footnote says once: the window and statistic
given on the command line, the peak of ``--peak-tflops`` or ``--gpu`` and the log of the baseline row; each row gives
its own run's benchmark settings, not another row's."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.peaks import GPU_PEAKS
from megatron.oellm.scaling_table import DEFAULT_PEAK_TFLOPS, ScalingRow, Window, format_csv
from megatron.oellm.scaling_table.summary import BENCHMARK_SETTINGS
from tests.unit_tests.megatron_logs import megatron_args, megatron_log


def _logs(tmp_path: Path, settings: list[dict]) -> list[str]:
    """One ten-iteration log per entry of ``settings`` (argument overrides), on 4, 8, 16... nodes of the Qwen3.5
    strong-scaling recipe at fresh step times; their paths. The steps (120 to 180 s) keep every row's MFU plausible
    against each GPU's peak, the A100's 312 TFLOP/s included (steps of 60 s gave the 4-node row 321 TFLOP/s, an MFU
    over 100 % that made the row implausible on some seeds)."""
    paths = []
    for number, overrides in enumerate(settings):
        nodes = 4 * 2 ** number
        args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 4 * nodes, **overrides})
        step_ms = round(random.uniform(120_000.0, 180_000.0), 1)
        path = tmp_path / f"{nodes}n.out"
        path.write_text(megatron_log(args, [round(step_ms * random.uniform(0.98, 1.02), 1) for _ in range(10)],
                                     [130.0] * 10))
        paths.append(str(path))
    return paths


def _csv(capsys: pytest.CaptureFixture, *argv: str) -> list[dict[str, str]]:
    """The rows of ``oellm table ARGV --format csv``."""
    capsys.readouterr()
    assert main(["table", *argv, "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


@pytest.mark.parametrize("peak_option", ["--peak-tflops", "--gpu"])
def test_the_command_lines_window_statistic_peak_and_baseline_are_on_every_row(
        tmp_path: Path, capsys: pytest.CaptureFixture, peak_option: str) -> None:
    logs = _logs(tmp_path, [{}, {}, {}])
    first = random.randrange(3, 7)  # from 3, as the default window: past the warm-up
    last = random.randrange(first + 1, 11)
    statistic = random.choice(["median", "mean"])
    if peak_option == "--gpu":
        gpu = random.choice(sorted(name for name in GPU_PEAKS if GPU_PEAKS[name].bf16_tflops != DEFAULT_PEAK_TFLOPS))
        given, peak = gpu, GPU_PEAKS[gpu].bf16_tflops
    else:
        peak = float(random.randrange(300, 2000))
        given = str(peak)
    baseline = random.randrange(1, len(logs) + 1)
    rows = _csv(capsys, *logs, "--window", f"{first}-{last}", "--statistic", statistic, peak_option, given,
                "--baseline-row", str(baseline))
    assert len(rows) == len(logs)
    for row in rows:
        assert (row["window"], row["statistic"]) == (f"{first}-{last}", statistic)
        assert float(row["peak_tflops"]) == peak
        assert row["baseline_log"] == rows[baseline - 1]["log"]
    assert rows[baseline - 1]["scaling"] == "baseline"


def test_each_row_gives_its_own_runs_settings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Runs of other recompute settings: no series of the baseline's, yet each row names its own run's setup."""
    recompute = [{"recompute_granularity": "full", "recompute_num_layers": random.randrange(1, 5)},
                 {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None}]
    random.shuffle(recompute)
    rows = _csv(capsys, *_logs(tmp_path, recompute))
    for row, overrides in zip(rows, recompute, strict=True):
        assert row["recompute_granularity"] == overrides["recompute_granularity"]
        assert row["recompute_num_layers"] == str(overrides["recompute_num_layers"])


def test_the_csvs_default_peak_is_the_markdowns() -> None:
    """Without a peak, the CSV names the one the markdown's MFU and footnote default to."""
    row = ScalingRow("run.log", "qwen3.5-35b-a3b", "log not readable: cut",
                     settings=tuple((name, random.choice(["None", "full"])) for name in BENCHMARK_SETTINGS))
    (line,) = csv.DictReader(io.StringIO(format_csv([row], None, Window())))
    assert float(line["peak_tflops"]) == DEFAULT_PEAK_TFLOPS
