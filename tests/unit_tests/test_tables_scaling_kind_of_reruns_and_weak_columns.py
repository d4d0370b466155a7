"""The series a row is rated in: a rerun of the baseline's workload on as many GPUs has its global batch size, so it
is of the strong series (it is of the weak one too, and the strong one names it); a column of the weak series alone
prints as the reports print it, without markers, as one of the strong series alone does."""

from __future__ import annotations

import csv
import io
import random

from megatron.oellm.scaling_table import ScalingRow, Window, format_csv, format_markdown, with_efficiency


def _row(nodes: int, gbs: int, log: str) -> ScalingRow:
    """An ok row of one model on ``nodes`` 4-GPU nodes at global batch size ``gbs``, fresh numbers."""
    return ScalingRow(log, "qwen3.5-35b-a3b", "ok", nodes=float(nodes), gpus=4 * nodes, global_batch_size=gbs,
                      micro_batch_size=4, seq_length=4096, step_time_s=random.uniform(5, 20),
                      tokens_per_s_per_gpu=random.uniform(4000, 7000))


def test_a_rerun_on_as_many_gpus_is_of_the_strong_series() -> None:
    nodes, gbs = random.choice([2, 4, 8]), random.choice([128, 256, 512])
    table = [_row(nodes, gbs, "first.log"), _row(nodes, gbs, "rerun.log"), _row(2 * nodes, 2 * gbs, "weak.log")]
    rows, baseline = with_efficiency(table, baseline_row=1)
    assert [row.scaling for row in rows] == ["baseline", "strong", "weak"]
    rerun = rows[1]
    assert f"{100 * rerun.efficiency:.1f}% (strong)" in format_markdown(rows, baseline, Window())
    assert [line["scaling"] for line in csv.DictReader(io.StringIO(format_csv(rows, baseline, Window())))] == [
        "baseline", "strong", "weak"]


def test_a_column_of_the_weak_series_alone_has_no_markers() -> None:
    gbs_per_node = random.choice([16, 32, 64])
    table = [_row(nodes, gbs_per_node * nodes, f"{nodes}n.log") for nodes in (2, 4, 8, 16)]
    rows, baseline = with_efficiency(table, baseline_row=1)
    assert {row.scaling for row in rows} == {"baseline", "weak"}
    markdown = format_markdown(rows, baseline, Window())
    assert "(weak)" not in markdown and "(strong)" not in markdown
    for row in rows:
        assert f"| {100 * row.efficiency:.1f}% |" in markdown
