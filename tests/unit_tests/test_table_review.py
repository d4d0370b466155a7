"""``oellm table`` review: defects found in the parser and the table, each shown by a synthetic megatron-core 0.19.2
log."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text, read_log
from megatron.oellm.scaling_table import CSV_FIELDS, Window, format_csv, format_markdown, summarise, with_efficiency
from tests.unit_tests.test_tables import FROM_FLAGS, _log, _megatron_args


def _row(overrides: dict, nodes: int, tokens: float, path: str):
    """The row of a run of the MN5 Qwen3.5 recipe with ``overrides`` on ``nodes`` nodes at ``tokens`` tokens/s/GPU."""
    args = _megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": nodes * 4, **overrides})
    step_ms = args["global_batch_size"] * args["seq_length"] / tokens / (nodes * 4) * 1000
    return summarise(parse_log_text(_log(args, [step_ms] * 10, [100.0] * 10), path), Window(), 4)


def test_two_different_unregistered_models_get_no_efficiency_against_each_other():
    """Two models that match no registry card were both named ``unregistered model`` and compared: a 2-layer and
    an 8-layer MoE read as a 300% "scaling efficiency"."""
    small = _row({"hidden_size": 1000, **FROM_FLAGS}, 1, random.uniform(5000, 7000), "small.log")
    other = _row({"hidden_size": 1200, **FROM_FLAGS}, 2, random.uniform(15000, 20000), "other.log")
    same = _row({"hidden_size": 1000, **FROM_FLAGS}, 4, random.uniform(5000, 7000), "same.log")
    assert small.model == other.model == "unregistered model"
    rows, baseline = with_efficiency([small, other, same])
    assert baseline.log == "small.log"
    by_log = {row.log: row for row in rows}
    assert by_log["other.log"].efficiency is None
    assert by_log["same.log"].efficiency == same.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu


def test_two_different_unknown_models_get_no_efficiency_against_each_other():
    """Models no card describes (``unknown model``) differ as their architecture flags do."""
    dense = {"num_experts": None, **FROM_FLAGS}
    small = _row({**dense, "hidden_size": 1024}, 1, random.uniform(5000, 7000), "small.log")
    other = _row({**dense, "hidden_size": 2048}, 2, random.uniform(5000, 7000), "other.log")
    same = _row({**dense, "hidden_size": 1024}, 2, random.uniform(5000, 7000), "same.log")
    assert small.model == other.model == "unknown model"
    rows, _ = with_efficiency([small, other, same])
    by_log = {row.log: row for row in rows}
    assert by_log["other.log"].efficiency is None
    assert by_log["same.log"].efficiency == same.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu


def test_csv_keeps_its_columns():
    """The key that tells models apart is no CSV column."""
    row = _row(FROM_FLAGS, 1, random.uniform(5000, 7000), "a.log")
    assert format_csv([row]).splitlines()[0].split(",") == CSV_FIELDS
    assert "model_key" not in CSV_FIELDS


def _resumed_log(args: dict, start: int, total: int) -> str:
    """A log of a run resumed from a checkpoint at iteration ``start - 1``: its lines are ``start..total``."""
    times = [round(random.uniform(900, 1100), 1) for _ in range(start, total + 1)]
    text = _log({**args, "train_iters": total}, times, [100.0] * len(times), total=total)
    for old, new in zip(range(1, total + 1), range(start, total + 1), strict=False):
        text = text.replace(f"iteration {old:8d}/", f"iteration #{new:8d}/", 1)
    return text.replace("iteration #", "iteration ") + "[after training is done] datetime: 2026-10-19 12:00:00\n"


def test_a_resumed_run_that_starts_after_the_window_says_so():
    """A log of a run resumed at iteration 31 read with the default window 3-10 blamed the log interval."""
    start = random.randint(20, 40)
    args = _megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = parse_log_text(_resumed_log(args, start, start + 9))
    assert log.runs[-1].start == start
    row = summarise(log, Window(), 4)
    assert not row.ok and "log interval" not in row.status
    assert f"begins at iteration {start}" in row.status


def _cells(markdown_row: str) -> list[str]:
    """The cells of a markdown table row, ``\\|`` being a pipe inside a cell."""
    return [cell.strip() for cell in markdown_row.replace("\\|", "\0").strip().strip("|").split("|")]


def test_a_pipe_in_a_crash_message_or_path_stays_in_its_cell():
    """A hybrid layer pattern marks pipeline stages with ``|``; a crash message quoting one (or a log path with a
    pipe) split the row into more cells than the header has, shifting the status into no column."""
    args = _megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    stages = "|".join("GEGE" for _ in range(random.randint(2, 4)))  # short enough to be shown whole
    crash = f"Traceback (most recent call last):\nValueError: hybrid layer pattern '{stages}' is not periodic\n"
    times = [round(random.uniform(900, 1100), 1) for _ in range(5)]
    row = summarise(parse_log_text(_log(args, times, [100.0] * 5, tail=crash), "runs|a.log"), Window(), 4)
    assert stages in row.status
    table = format_markdown([row], None, Window()).splitlines()
    assert len(_cells(table[2])) == len(_cells(table[0]))
    assert _cells(table[2])[-2:] == ["runs\0a.log", row.status.replace("|", "\0")]


@pytest.mark.parametrize("garbled", ["{}[rank3]: W1019 12:00:00", "[{}, {}]"])
def test_a_garbled_architecture_argument_is_an_unknown_model_not_a_traceback(garbled, tmp_path, capsys):
    """Another rank's output cut into the block's ``moe_shared_expert_intermediate_size``: the card rebuilt from the
    flags carried the text, and the FLOP count raised a TypeError out of ``oellm table`` (every row lost)."""
    width = random.choice([256, 512, 1024])
    value = garbled.format(width, width)
    args = _megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **FROM_FLAGS,
                                                             "moe_shared_expert_intermediate_size": value})
    times = [round(random.uniform(70000, 80000), 1) for _ in range(10)]
    tflops = [round(random.uniform(120, 140), 1) for _ in range(10)]
    path = tmp_path / "garbled.log"
    path.write_text(_log(args, times, tflops))
    row = summarise(read_log(path), Window(), 4)
    assert row.ok and row.model == "unknown model" and row.tflops_per_gpu is None
    assert row.tflops_per_gpu_logged == statistics.median(tflops[2:])
    assert main(["table", str(path), "--format", "csv"]) == 0
    assert "unknown model" in capsys.readouterr().out
