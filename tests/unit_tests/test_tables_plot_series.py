"""``oellm table --plot`` draws each scaling series as its own line with a legend: the report's strong-scaling runs
(GBS 4096 on 4..128 nodes) and weak-scaling runs (GBS 64 x nodes, the 64-node run shared) were joined into one
zigzag line. Rows from generated Megatron logs, fresh random throughputs."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, plot, sorted_rows, summarise, with_efficiency
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

STRONG_NODES = (4, 8, 16, 32, 64, 128)
WEAK_NODES = (4, 8, 16, 32)
"""The report's tables: strong scaling at GBS 4096, weak scaling at GBS 64 x nodes (its 64-node row is the strong
table's)."""


def _row(nodes: int, global_batch: int, tokens: float):
    """The table row of a generated 10-iteration log on ``nodes`` nodes at ``global_batch`` and ``tokens``/s/GPU."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4,
                                                           "global_batch_size": global_batch})
    step_ms = global_batch * 4096 / tokens / (nodes * 4) * 1000
    row = summarise(parse_log_text(megatron_log(args, [step_ms] * 10, [120.0] * 10), f"{nodes}n_gbs{global_batch}.log"),
                    Window(), 4)
    assert row.ok
    return row


@pytest.fixture
def rows() -> list:
    strong = [_row(n, 4096, random.uniform(5000, 7500)) for n in STRONG_NODES]
    weak = [_row(n, 64 * n, random.uniform(5000, 7500)) for n in WEAK_NODES]
    mixed = [*strong, *weak]
    random.shuffle(mixed)
    return sorted_rows(mixed)


def _drawn(axis) -> dict[tuple, list[float]]:
    """x values -> y values of each line drawn on ``axis``."""
    return {tuple(float(x) for x in line.get_xdata()): [float(y) for y in line.get_ydata()] for line in axis.lines}


def test_strong_and_weak_series_are_separate_lines_with_a_legend(rows, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    strong = sorted((row for row in rows if row.global_batch_size == 4096), key=lambda row: row.nodes)
    weak = sorted((row for row in rows if row.global_batch_size == 16 * row.gpus), key=lambda row: row.nodes)
    assert [row.nodes for row in weak] == [4, 8, 16, 32, 64] and weak[-1] is strong[4]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    table, _ = with_efficiency(rows, baseline_row=next(k for k, row in enumerate(rows, 1) if row is strong[1]))
    plot(table, str(tmp_path / "scaling.png"))
    (figure,) = figures
    throughput, efficiency = figure.axes
    assert _drawn(throughput) == {
        tuple(float(row.nodes) for row in series): [row.tokens_per_s_per_gpu for row in series]
        for series in (strong, weak)}
    assert _drawn(efficiency) == {tuple(float(n) for n in STRONG_NODES): [
        pytest.approx(100 * row.tokens_per_s_per_gpu / strong[1].tokens_per_s_per_gpu) for row in strong]}
    (legend,) = figure.legends
    assert sorted(text.get_text() for text in legend.get_texts()) == [
        "qwen3.5-35b-a3b, seq 4096, GBS 16 per GPU (weak scaling)",
        "qwen3.5-35b-a3b, seq 4096, GBS 4096 (strong scaling)"]
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_series_are_the_tables_strong_and_weak_workloads(rows):
    """Strong: one model, sequence length and GBS; weak: one GBS per GPU; a lone run (another GBS on one node count)
    is a series of its own, and another sequence length is another workload."""
    from megatron.oellm.scaling_table import scaling_series

    lone = _row(8, 768, random.uniform(5000, 7500))
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "seq_length": 8192})
    longer = summarise(parse_log_text(megatron_log(args, [random.uniform(1.4e5, 1.6e5)] * 10, [130.0] * 10)),
                       Window(), 4)
    series = dict(scaling_series([*rows, lone, longer]))
    assert sorted(series) == [
        "qwen3.5-35b-a3b, seq 4096, GBS 16 per GPU (weak scaling)",
        "qwen3.5-35b-a3b, seq 4096, GBS 4096 (strong scaling)", "qwen3.5-35b-a3b, seq 4096, GBS 768",
        "qwen3.5-35b-a3b, seq 8192, GBS 4096"]
    assert [row.nodes for row in series["qwen3.5-35b-a3b, seq 4096, GBS 4096 (strong scaling)"]] == list(STRONG_NODES)
    assert [row.global_batch_size for row in series["qwen3.5-35b-a3b, seq 4096, GBS 16 per GPU (weak scaling)"]] == [
        256, 512, 1024, 2048, 4096]
    assert series["qwen3.5-35b-a3b, seq 4096, GBS 768"] == [lone]
    assert series["qwen3.5-35b-a3b, seq 8192, GBS 4096"] == [longer]


def test_a_sweeps_many_series_keep_their_panels_and_their_own_styles(tmp_path, monkeypatch):
    """A sweep of 30 to 45 series (lone global batch sizes and weak series over one and two nodes): the legend sits
    below both panels without covering their labels, the layout is applied (no matplotlib warning), and no two
    series share a colour and a marker."""
    pytest.importorskip("matplotlib")
    import warnings

    import matplotlib.pyplot as plt

    from megatron.oellm.scaling_table import scaling_series

    count = random.randint(30, 45)
    rows = sorted_rows([_row(1 + k % 2, 64 * (k + 1), random.uniform(5000, 7500)) for k in range(count)])
    series = scaling_series(rows)
    assert len(series) > 20
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot(rows, str(tmp_path / "sweep.png"))
    assert not [str(w.message) for w in caught if "layout" in str(w.message).lower()]
    (figure,) = figures
    (legend,) = figure.legends
    assert len(legend.get_texts()) == len(series)
    renderer = figure.canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 <= min(axis.get_tightbbox(renderer).y0 for axis in figure.axes)
    styles = {(line.get_color(), line.get_marker()) for line in figure.axes[0].lines}
    assert len(styles) == len(series)
