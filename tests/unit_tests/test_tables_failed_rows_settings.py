"""A row without numbers keeps its run's benchmark settings for the CSV, whatever refused its numbers (the window's
status, an arguments block without a positive size, a garbled vocabulary argument, implausible numbers), and none
where its log has no arguments block; those settings stay out of what the table says of its rated rows (the FP8
footnote, the settings that split the series, the rows without an efficiency), which are ok rows only."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, format_csv, summarise
from megatron.oellm.scaling_table.summary import BENCHMARK_SETTINGS, benchmark_settings
from tests.unit_tests.megatron_logs import iteration_line, megatron_args, megatron_log

FAILURES = {
    "a seq_length that is no positive integer": {"seq_length": None},
    "a world size of zero": {"world_size": 0},
    "a garbled vocabulary argument": {"make_vocab_size_divisible_by": "12[rank3]: W1019 warning"},
    "a world size that is not the product of the parallel sizes": {"data_parallel_size": 3},
}
"""Arguments that leave an otherwise whole log without numbers, each refused at another point of the summary."""


def _settings() -> dict:
    """Fresh benchmark settings of a run: dispatcher, recompute and FP8 (its routing and attention backend are the
    recipe's)."""
    return {"moe_token_dispatcher_type": random.choice(["alltoall", "flex", "allgather"]),
            "recompute_granularity": random.choice(["full", "selective"]),
            "recompute_num_layers": random.randrange(1, 9), "fp8": random.choice(["hybrid", "e4m3", None])}


def _args(overrides: dict) -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe with ``overrides``."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **overrides})


def _log_text(args: dict) -> str:
    """A whole ten-iteration log of ``args`` with fresh step times."""
    step_ms = round(random.uniform(60_000.0, 90_000.0), 1)
    return megatron_log(args, [round(step_ms * random.uniform(0.98, 1.02), 1) for _ in range(10)], [130.0] * 10)


@pytest.mark.parametrize("cause", FAILURES)
def test_a_row_refused_after_the_window_keeps_its_settings_in_the_csv(cause: str) -> None:
    args = _args({**_settings(), **FAILURES[cause]})
    row = summarise(parse_log_text(_log_text(args), "refused.log"), Window(), 4)
    assert not row.ok, row.status
    (line,) = csv.DictReader(io.StringIO(format_csv([row], None, Window())))
    assert line["status"] == row.status
    # as an ok row of these arguments gives them (a setting the run does not read is None)
    assert [line[name] for name in BENCHMARK_SETTINGS] == [value for _, value in benchmark_settings(args)]
    assert any(value != "None" for _, value in benchmark_settings(args))


def test_a_log_without_an_arguments_block_has_no_settings() -> None:
    """Iteration lines alone (one task's output file): no setting is known, so none is printed as ``None``."""
    gbs = random.choice([256, 512, 1024])
    lines = [iteration_line(i, 10, gbs, random.uniform(60_000.0, 90_000.0), 130.0) for i in range(1, 11)]
    row = summarise(parse_log_text("\n".join(lines) + "\n", "task.out"), Window(), 4)
    assert not row.ok and row.settings == ()
    (line,) = csv.DictReader(io.StringIO(format_csv([row], None, Window())))
    assert all(line[name] == "" for name in BENCHMARK_SETTINGS)


def _table(tmp_path: Path, capsys: pytest.CaptureFixture, *failed_overrides: dict) -> tuple[str, str]:
    """stdout and stderr of ``oellm table`` over an ok BF16 run and one failed run (arguments that do not multiply to
    its world size) per entry of ``failed_overrides``, of those settings."""
    ok = tmp_path / "a_ok.out"
    ok.write_text(_log_text(_args({"fp8": None})))
    logs = [str(ok)]
    for number, overrides in enumerate(failed_overrides):
        logs.append(str(tmp_path / f"b_failed_{number}.out"))
        Path(logs[-1]).write_text(_log_text(_args({**overrides, "data_parallel_size": 3})))
    capsys.readouterr()
    assert main(["table", *logs]) == 0
    return capsys.readouterr()


def test_a_failed_fp8_run_is_not_named_in_the_fp8_sentence(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, _ = _table(tmp_path, capsys, {"fp8": random.choice(["hybrid", "e4m3"])})
    assert "implausible arguments" in out
    assert "FP8 run" not in out and "--precision fp8" not in out


def test_failed_runs_of_other_settings_split_no_series(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The footnote names the settings the rated rows differ in, and the unrated-rows note names ok rows: failed runs
    of other recompute and dispatcher settings than the ok run's (the recipe's full recompute and flex dispatcher), and
    than each other's, are neither."""
    first, second = random.sample(["alltoall", "allgather"], 2)
    out, err = _table(tmp_path, capsys, {"recompute_granularity": "selective", "moe_token_dispatcher_type": first},
                      {"recompute_granularity": "full", "moe_token_dispatcher_type": second})
    assert out.count("implausible arguments") == 2
    assert "These rows differ in" not in out
    assert "no efficiency" not in err
