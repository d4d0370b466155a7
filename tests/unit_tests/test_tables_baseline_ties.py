"""``oellm table``: a baseline picked by order among rows of the same workload on as many nodes is named."""

from __future__ import annotations

import random

from megatron.oellm.cli import main
from megatron.oellm.scaling_table import ScalingRow, sorted_rows, with_efficiency
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times


def _log(path, nodes: int, centre_ms: float, **overrides) -> str:
    """A Megatron log of the MN5 Qwen3.5 strong-scaling recipe's row 2 run on ``nodes`` nodes, written to ``path``."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4, **overrides})
    path.write_text(megatron_log(args, random_times(10, centre_ms), [133.0] * 10))
    return str(path)


def test_a_resubmitted_rows_second_log_is_named_beside_the_baseline(tmp_path, capsys):
    """A resubmitted job leaves two logs of one row; both are table rows, and the baseline was the first of them
    without a word, though the other gives other efficiencies. A note on stderr names both and --baseline-row; the
    table on stdout (piped into a file or a CSV reader) is unchanged."""
    first = _log(tmp_path / "slurm-101.out", 8, random.uniform(70000, 80000))
    second = _log(tmp_path / "slurm-202.out", 8, random.uniform(85000, 95000))
    larger = _log(tmp_path / "slurm-303.out", 16, random.uniform(40000, 45000))
    for options in ([], ["--baseline-nodes", "8"]):
        assert main(["table", larger, first, second, *options]) == 0
        captured = capsys.readouterr()
        printed = [line for line in captured.out.splitlines() if line.startswith("| 8 ")]
        baseline_number = 1 if first in printed[0] else 2
        baseline, other = (first, second) if baseline_number == 1 else (second, first)
        assert captured.err == (f"note: the efficiency baseline is row {baseline_number} ({baseline}); row "
                                f"{3 - baseline_number} ({other}) also runs its workload on 8 nodes and would give "
                                "other efficiencies: --baseline-row N picks one (rows numbered as printed)\n")
    assert main(["table", larger, first, second, "--baseline-row", "2"]) == 0
    assert capsys.readouterr().err == ""


def test_rows_of_another_workload_on_the_same_nodes_are_no_ties(tmp_path, capsys):
    """Rows on the baseline's node count that train another global batch (another workload: no efficiency against
    it) are not candidates for the baseline, and a single row per node count gets no ties note; the row left
    without an efficiency is named instead."""
    base = _log(tmp_path / "a.out", 8, random.uniform(70000, 80000))
    other_batch = _log(tmp_path / "b.out", 8, random.uniform(70000, 80000), global_batch_size=2048)
    larger = _log(tmp_path / "c.out", 16, random.uniform(40000, 45000))
    assert main(["table", base, other_batch, larger]) == 0
    err = capsys.readouterr().err
    assert "also run" not in err
    assert err.startswith("note: row 2 has no efficiency: another model, sequence length or global batch size (per "
                          "GPU) than the baseline, row 1 (qwen3.5-35b-a3b, seq 4096, GBS 2048 on 8 nodes)"), err


def _row(nodes: int, global_batch_size: int) -> ScalingRow:
    return ScalingRow(f"{nodes}n-{global_batch_size}.out", "qwen3.5-35b-a3b", "ok", nodes=float(nodes), gpus=nodes * 4,
                      global_batch_size=global_batch_size, micro_batch_size=4, seq_length=4096, step_time_s=10.0,
                      tokens_per_s_per_gpu=random.uniform(5000, 7000), model_key="k")


def test_the_default_baseline_starts_the_largest_strong_scaling_series():
    """A weak-scaling start (4 nodes, GBS 512) before a strong series (8 to 64 nodes, GBS 1024) took the baseline as
    the run on the fewest nodes and left three of the strong series' rows unrated; the strong series' first run
    rates all five (the 4-node run as its weak-scaling point)."""
    rows = sorted_rows([_row(4, 512), _row(8, 1024), _row(16, 1024), _row(32, 1024), _row(64, 1024)])
    rated, baseline = with_efficiency(rows)
    assert (baseline.nodes, baseline.global_batch_size) == (8, 1024)
    assert all(row.efficiency is not None for row in rated)


def test_the_default_baseline_is_not_a_weak_runs_middle_point_that_starts_a_short_strong_series():
    """A weak series (1 to 8 nodes at 32 sequences per GPU) and a strong one starting at its 4-node point: that
    point rated the most rows, became the baseline, and the smaller weak runs read above 100 %. The largest series
    is the weak one, and its first run is the baseline."""
    rows = sorted_rows([_row(1, 128), _row(2, 256), _row(4, 512), _row(8, 1024), _row(8, 512)])
    rated, baseline = with_efficiency(rows)
    assert (baseline.nodes, baseline.global_batch_size) == (1, 128)
    assert {(row.nodes, row.global_batch_size) for row in rated if row.efficiency is not None} == {
        (1, 128), (2, 256), (4, 512), (8, 1024)}
