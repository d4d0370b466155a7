"""``oellm table`` showed a benchmark setting megatron prints but does not read as if the run used it: a BF16 run's
``fp8_recipe delayed`` (megatron's default, printed with ``fp8`` None), a backend of the flex dispatcher in an
alltoall run, a recompute method without full recompute. The CSV gave ``fp8_recipe=delayed`` on every BF16 row, two
BF16 runs whose blocks printed different recipes were two series, and the note on an FP8 run beside a BF16 one said
``fp8_recipe blockwise in the baseline, delayed in row 2``. Such a setting is now ``None`` where the run does not read
it, and only compared between runs that read it. Generated logs, fresh random throughputs and values."""

from __future__ import annotations

import csv
import io
import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, format_csv, summarise, unrated_rows_note, with_efficiency
from megatron.oellm.scaling_table.summary import sorted_rows, varying_settings
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

STEM = "qwen3_5_35b_a3b_mn5_strong"

NOT_READ = [
    ("fp8_recipe", {"fp8": None}, {"fp8": "hybrid"}, ["delayed", "blockwise", "tensorwise"]),
    ("moe_flex_dispatcher_backend", {"moe_token_dispatcher_type": "alltoall"}, {"moe_token_dispatcher_type": "flex"},
     ["deepep", "hybridep"]),
    ("recompute_method", {"recompute_granularity": None}, {"recompute_granularity": "full"}, ["uniform", "block"]),
    ("recompute_num_layers", {"recompute_granularity": None}, {"recompute_granularity": "full"}, [1, 2, 4]),
    ("recompute_modules", {"recompute_granularity": "full"}, {"recompute_granularity": "selective"},
     [["core_attn"], ["moe_act", "layernorm"]]),
]
"""(setting, arguments of a run that does not read it, arguments of one that does, values megatron may print)."""


def _row(nodes: int, tokens: float, log: str, overrides: dict):
    """The row of a generated log of the strong recipe's row 2 on ``nodes`` nodes at ``tokens``/s/GPU."""
    args = megatron_args(STEM, 2, {"world_size": nodes * 4, **overrides})
    step_ms = args["global_batch_size"] * args["seq_length"] / tokens / (nodes * 4) * 1000
    return summarise(parse_log_text(megatron_log(args, [round(step_ms, 1)] * 10, [120.0] * 10), log), Window(), 4)


@pytest.mark.parametrize("name, unread, _read, values", NOT_READ)
def test_runs_that_do_not_read_a_setting_are_one_series_whatever_they_print(name, unread, _read, values):
    printed = random.sample(values, 2)
    tokens = {8: random.uniform(4000, 7000), 16: random.uniform(4000, 7000)}
    rows = sorted_rows([_row(nodes, tokens[nodes], f"{nodes}n.out", {**unread, name: value})
                        for nodes, value in zip((8, 16), printed, strict=True)])
    rated, baseline = with_efficiency(rows)
    assert baseline.nodes == 8 and rated[1].efficiency == pytest.approx(tokens[16] / tokens[8], rel=1e-3)
    assert unrated_rows_note(rated, baseline) is None and name not in varying_settings(rated)
    lines = list(csv.DictReader(io.StringIO(format_csv(rated, baseline, Window()))))
    assert [line[name] for line in lines] == ["None", "None"]


@pytest.mark.parametrize("name, unread, read, values", NOT_READ)
def test_a_run_that_reads_a_setting_beside_one_that_does_not_is_told_apart_by_what_decides_it(name, unread, read,
                                                                                              values):
    """The note and the footnote's list name the argument that differs (``fp8``), not the setting one run reads and
    the other only prints; the CSV gives the setting of the run that reads it."""
    used, default = random.sample(values, 2)
    ours = _row(8, random.uniform(4000, 7000), "reads.out", {**read, name: used})
    other = _row(8, random.uniform(4000, 7000), "prints.out", {**unread, name: default})
    rated, baseline = with_efficiency([ours, other], baseline_row=1)
    (decisive,) = read
    note = unrated_rows_note(rated, baseline)
    assert f"{decisive} {read[decisive]} in the baseline, {unread[decisive]} in row 2" in note
    assert f"{name} " not in note and name not in varying_settings(rated)
    lines = list(csv.DictReader(io.StringIO(format_csv(rated, baseline, Window()))))
    assert [line[name] for line in lines] == [str(used), "None"]


def test_selective_recompute_of_the_default_modules_is_the_series_of_one_naming_them():
    """megatron-core recomputes ``core_attn`` under selective recompute without ``--recompute-modules`` while the
    block prints ``recompute_modules None``: such a run and one naming ``core_attn`` are one series, with the modules
    it recomputes in the CSV; one recomputing other modules is another series."""
    selective = {"recompute_granularity": "selective"}
    tokens = {8: random.uniform(4000, 7000), 16: random.uniform(4000, 7000)}
    default, named = (_row(nodes, tokens[nodes], f"{nodes}n.out", {**selective, "recompute_modules": modules})
                      for nodes, modules in ((8, None), (16, ["core_attn"])))
    rated, baseline = with_efficiency([default, named])
    assert rated[1].efficiency == pytest.approx(tokens[16] / tokens[8], rel=1e-3)
    lines = list(csv.DictReader(io.StringIO(format_csv(rated, baseline, Window()))))
    assert [line["recompute_modules"] for line in lines] == [str(["core_attn"])] * 2
    other = _row(16, tokens[16], "other.out", {**selective, "recompute_modules": ["moe_act", "layernorm"]})
    rated, baseline = with_efficiency([default, other])
    assert "recompute_modules" in varying_settings(rated) and rated[1].efficiency is None
