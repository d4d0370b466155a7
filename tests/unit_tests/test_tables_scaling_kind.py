"""A table that holds both the baseline's strong- and weak-scaling runs rates both in one efficiency column; each
cell then says which series rates it, the CSV gives the series of every rated row, and the CSV repeats what the
markdown's footnote says of the whole table (window, statistic, peak, baseline) with the run's benchmark settings."""

from __future__ import annotations

import csv
import io
import random

from megatron.oellm.scaling_table import CSV_FIELDS, ScalingRow, Window, format_csv, format_markdown, with_efficiency
from megatron.oellm.scaling_table.summary import BENCHMARK_SETTINGS

SETTINGS = tuple((name, random.choice(["None", "True", "alltoall"])) for name in BENCHMARK_SETTINGS)


def _row(nodes: int, gbs: int, log: str) -> ScalingRow:
    """An ok row of one model on ``nodes`` 4-GPU nodes at global batch size ``gbs``."""
    return ScalingRow(log, "qwen3.5-35b-a3b", "ok", nodes=float(nodes), gpus=4 * nodes, global_batch_size=gbs,
                      micro_batch_size=4, seq_length=4096, step_time_s=random.uniform(5, 20),
                      tokens_per_s_per_gpu=random.uniform(4000, 7000), settings=SETTINGS)


def _table() -> list[ScalingRow]:
    """The baseline on 4 nodes at GBS 256, its strong series at GBS 256 and its weak series at 64 x nodes."""
    return [_row(4, 256, "base.log"), _row(8, 256, "strong8.log"), _row(16, 256, "strong16.log"),
            _row(8, 512, "weak8.log"), _row(16, 1024, "weak16.log"), _row(8, 4096, "other.log")]


def _cells(markdown: str) -> dict[str, list[str]]:
    """The markdown rows' cells by their Log cell."""
    lines = markdown.split("\n\n")[0].splitlines()[2:]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return {row[12]: row for row in cells}


def test_a_column_of_both_series_marks_each_cell_and_says_so_in_the_footnote():
    rows, baseline = with_efficiency(_table(), baseline_row=1)
    by_log = {row.log: row for row in rows}
    assert [by_log[log].scaling for log in ("base.log", "strong8.log", "strong16.log", "weak8.log", "weak16.log",
                                            "other.log")] == ["baseline", "strong", "strong", "weak", "weak", ""]
    markdown = format_markdown(rows, baseline, Window())
    cells = _cells(markdown)
    for log in ("strong8.log", "strong16.log", "weak8.log", "weak16.log"):
        expected = f"{100 * by_log[log].efficiency:.1f}% ({by_log[log].scaling})"
        assert cells[log][10] == expected
    assert cells["base.log"][10] == "100.0%" and cells["other.log"][10] == ""
    assert "(strong) and (weak) name the baseline's series" in markdown


def test_a_column_of_one_series_stays_as_the_reports_print_it():
    strong_only = [row for row in _table() if row.global_batch_size == 256]
    rows, baseline = with_efficiency(strong_only, baseline_row=1)
    markdown = format_markdown(rows, baseline, Window())
    assert "(strong)" not in markdown and "(weak)" not in markdown
    assert {cells[10] for cells in _cells(markdown).values()} == {f"{100 * row.efficiency:.1f}%" for row in rows}


def test_the_csv_gives_the_series_the_tables_settings_and_the_runs_benchmark_settings():
    rows, baseline = with_efficiency(_table(), baseline_row=1)
    first, last = sorted(random.sample(range(1, 40), 2))
    window, peak = Window(first, last, random.choice(["median", "mean"])), random.uniform(300, 1000)
    parsed = list(csv.DictReader(io.StringIO(format_csv(rows, baseline, window, peak))))
    assert list(parsed[0]) == CSV_FIELDS
    for line, row in zip(parsed, rows, strict=True):
        assert line["scaling"] == row.scaling
        assert (line["window"], line["statistic"]) == (f"{first}-{last}", window.statistic)
        assert float(line["peak_tflops"]) == peak and line["baseline_log"] == "base.log"
        assert [line[name] for name in BENCHMARK_SETTINGS] == [value for _, value in SETTINGS]


def test_a_csv_without_a_baseline_or_settings_leaves_those_cells_empty():
    failed = ScalingRow("broken.log", "unknown model", "log not readable: cut")
    (line,) = csv.DictReader(io.StringIO(format_csv([failed], None, Window())))
    assert line["baseline_log"] == "" and line["scaling"] == ""
    assert all(line[name] == "" for name in BENCHMARK_SETTINGS)


def test_a_failed_runs_csv_row_names_its_benchmark_settings():
    """A run that stopped before the window's end (an OOM, a cut log) has no numbers, but its arguments block says
    which setup failed: the CSV gives its settings, as for an ok row."""
    from megatron.oellm.run_log import parse_log_text
    from megatron.oellm.scaling_table import summarise
    from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args

    granularity = random.choice(["full", "selective"])
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "recompute_granularity": granularity})
    lines = [*args_block(args), *(iteration_line(i, 10, args["global_batch_size"], 9000.0, 120.0) for i in (1, 2))]
    row = summarise(parse_log_text("\n".join(lines) + "\n", "cut.log"), Window(), 4)
    assert not row.ok
    (line,) = csv.DictReader(io.StringIO(format_csv([row], None, Window())))
    assert line["recompute_granularity"] == granularity and line["status"] == row.status
    assert args["fp8"] is None  # a BF16 run: megatron's printed FP8 recipe is one it does not read
    not_read = {"fp8_recipe", *(("recompute_modules",) if granularity == "full" else
                                ("recompute_method", "recompute_num_layers"))}
    # under selective recompute without --recompute-modules, megatron-core recomputes core_attn
    filled = {"recompute_modules": str(["core_attn"])} if granularity == "selective" else {}
    assert args.get("recompute_modules") is None
    assert [line[name] for name in BENCHMARK_SETTINGS] == [
        "None" if name in not_read else filled.get(name, str(args.get(name)).removeprefix("AttnBackend."))
        for name in BENCHMARK_SETTINGS]
