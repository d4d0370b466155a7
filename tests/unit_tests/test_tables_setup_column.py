"""Rows that differ only in a benchmark setting (the attention backend, forced or real routing, FP8) read alike in
every markdown column (``4 | 16 | 4096 | 4096 | 2``) and only the footnote said "These rows differ in
attention_backend", not which row is which. A Setup column after the model now gives each row's values of the
settings the table's rows differ in (failed rows too), and only where they differ; the CSV keeps its columns, one
per setting. Generated logs of the recipes' rows, fresh random throughputs and row orders."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.scaling_table import CSV_FIELDS
from tests.unit_tests.megatron_logs import log_then, megatron_args, megatron_log

ATTENTION = "qwen3_5_35b_a3b_mn5_attention"


def _ok_log(args: dict) -> str:
    """A whole ten-iteration log of ``args`` at a fresh throughput of 5,000-7,000 tokens/s/GPU."""
    step_ms = args["global_batch_size"] * args["seq_length"] / random.uniform(5000, 7000) / args["world_size"] * 1000
    return megatron_log(args, [round(step_ms * random.uniform(0.99, 1.01), 1) for _ in range(10)], [120.0] * 10)


def _write(tmp_path: Path, logs: dict[str, str]) -> list[str]:
    """The logs ``{name: text}`` written to ``tmp_path``, their paths in a random order."""
    paths = []
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    return random.sample(paths, len(paths))


def _setup_by_log(out: str) -> dict[str, str]:
    """The markdown table in ``out`` as {log file name: Setup cell}; asserts the column is there, after Model."""
    header, *rows = [line.strip("|").split(" | ") for line in out.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in header]
    assert header[header.index("Model") + 1] == "Setup" and header[-2:] == ["Log", "Status"]
    return {Path(row[-2].strip()).name: row[header.index("Setup")].strip() for row in rows}


def test_the_attention_rows_name_their_backend(tmp_path: Path, capsys) -> None:
    paths = _write(tmp_path, {f"row0{number}.out": _ok_log(megatron_args(ATTENTION, number)) for number in (1, 2)})
    assert main(["table", *paths]) == 0
    out = capsys.readouterr().out
    assert _setup_by_log(out) == {"row01.out": "attention_backend=flash", "row02.out": "attention_backend=auto"}
    assert "These rows differ in attention_backend" in out
    assert main(["table", *paths, "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(table[0]) == CSV_FIELDS and "setup" not in (name.lower() for name in CSV_FIELDS)


@pytest.mark.parametrize("stem", ["qwen3_5_35b_a3b_mn5_strong", "qwen3_5_35b_a3b_mn5_weak"])
def test_rows_of_one_setup_have_no_setup_column(stem: str, tmp_path: Path, capsys) -> None:
    """A report's table (one setting, several node counts) keeps the reports' columns."""
    numbers = random.sample(range(1, 6), random.randint(2, 5))
    paths = _write(tmp_path, {f"row{number:02d}.out": _ok_log(megatron_args(stem, number)) for number in numbers})
    assert main(["table", *paths]) == 0
    out = capsys.readouterr().out
    assert "Setup" not in out and "| Model | Log | Status |" in out


def test_a_failed_row_of_another_routing_shows_it(tmp_path: Path, capsys) -> None:
    """An ok forced-balancing row beside a failed real-routing one (the routing recipe's rows 1 and 3): the footnote
    names no setting (it speaks of the rated rows), the Setup column tells the two apart, each by the settings it
    differs in (routing and recompute layers)."""
    oom = ["[rank31]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    failed = megatron_args("qwen3_5_35b_a3b_mn5_routing", 3, {"train_iters": 10})
    paths = _write(tmp_path, {"forced.out": _ok_log(megatron_args("qwen3_5_35b_a3b_mn5_routing", 1)),
                              "real.out": log_then(failed, random.randint(1, 9), oom)})
    assert main(["table", *paths]) == 0
    out = capsys.readouterr().out
    assert _setup_by_log(out) == {
        "forced.out": "moe_router_force_load_balancing=True, recompute_num_layers=2",
        "real.out": "moe_router_force_load_balancing=False, recompute_num_layers=1"}
    assert "differ in" not in out


def test_a_setting_a_row_does_not_read_is_left_out_of_its_cell(tmp_path: Path, capsys) -> None:
    """A BF16 run beside FP8 runs of two recipes: the BF16 row's printed FP8 recipe is none it uses."""
    recipes = random.sample(["delayed", "tensorwise", "mxfp8", "blockwise"], 2)
    fp8 = random.choice(["hybrid", "e4m3"])
    logs = {"bf16.out": _ok_log(megatron_args(ATTENTION, 1, {"fp8": None, "fp8_recipe": random.choice(recipes)}))}
    logs.update({f"{recipe}.out": _ok_log(megatron_args(ATTENTION, 1, {"fp8": fp8, "fp8_recipe": recipe}))
                 for recipe in recipes})
    assert main(["table", *_write(tmp_path, logs)]) == 0
    assert _setup_by_log(capsys.readouterr().out) == {
        "bf16.out": "fp8=None", **{f"{recipe}.out": f"fp8={fp8}, fp8_recipe={recipe}" for recipe in recipes}}
