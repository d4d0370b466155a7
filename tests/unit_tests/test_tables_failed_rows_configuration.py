"""A row without numbers (out of memory, a crash, a truncated log, arguments the numbers cannot use) printed only its
model, log and status: Nodes, GPUs, Seq, GBS and MBS were blank in the markdown and the CSV, although the log's
arguments block gives them, and a sweep's failed rows are where a user needs to know which layout failed. They now
show the configuration the arguments give (a garbled or missing value stays blank); the measured columns stay empty,
and a failed row is still no baseline, no member of a series and last in the table. Generated logs of the recipes'
rows, fresh random iterations and step times."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import EXAMPLES, args_block, log_then, megatron_args, megatron_log

OOM = ["[rank31]: Traceback (most recent call last):", '[rank31]:   File "train.py", line 1, in step',
       "[rank31]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
CRASH = ["[rank0]: Traceback (most recent call last):", '[rank0]:   File "train.py", line 1, in step',
         "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"]
ENDINGS = {"out of memory": OOM, "crashed": CRASH, "truncated": []}
"""How a run ends before the window's last iteration: the status its row starts with, and the log's last lines."""

CONFIGURATION = ("nodes", "gpus", "seq_length", "global_batch_size", "micro_batch_size")
"""The row fields of the run's configuration, in the table's first five columns."""

MEASURED_CSV = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "tflops_per_gpu_logged", "mfu_fraction",
                "efficiency_fraction", "scaling")
"""The CSV columns a row without numbers leaves empty."""

STEMS = ("qwen3_5_35b_a3b_mn5_strong", "qwen3_5_35b_a3b_mn5_weak", "qwen3_5_35b_a3b_mn5_routing")


def _recipe_row() -> tuple[str, int, int]:
    """A random (recipe stem, row number, nodes) of the Qwen3.5 recipes."""
    stem = random.choice(STEMS)
    rows = load_recipe(EXAMPLES / f"{stem}.toml").rows
    number = random.randrange(1, len(rows) + 1)
    return stem, number, rows[number - 1].nodes


def _expected(args: dict) -> list[str]:
    """The configuration cells of a run of ``args`` on 4-GPU nodes, as the markdown prints them."""
    return [f"{args['world_size'] / 4:g}", str(args["world_size"]), str(args["seq_length"]),
            str(args["global_batch_size"]), str(args["micro_batch_size"])]


def _markdown_rows(out: str) -> list[list[str]]:
    """The cells of each body row of the markdown table in ``out``."""
    table = [line for line in out.splitlines() if line.startswith("| ")][1:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_failed_row_shows_the_configuration_of_its_arguments(ending, tmp_path: Path, capsys) -> None:
    stem, number, nodes = _recipe_row()
    args = megatron_args(stem, number, {"train_iters": 10})
    last = random.randint(1, 9)
    log = tmp_path / f"row{number:02d}-{nodes}n.out"
    log.write_text(log_then(args, last, ENDINGS[ending]))
    assert main(["table", str(log)]) == 1
    (cells,) = _markdown_rows(capsys.readouterr().out)
    assert cells[:5] == _expected(args) and cells[0] == f"{nodes:g}"
    assert cells[5:11] == [""] * 6, cells  # step time .. efficiency: nothing was measured
    assert cells[-1].startswith(ending) and " iteration " in cells[-1], cells[-1]
    assert main(["table", str(log), "--format", "csv"]) == 1
    (line,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert [line[name] for name in CONFIGURATION] == _expected(args)
    assert all(line[name] == "" for name in MEASURED_CSV), line


GARBLED = {"missing": None, "zero": 0, "cut": "[rank3]: W1019 warning"}
"""Values of a size that the block gives as no positive integer: none printed, a zero, another rank's output cut in."""

CONTRADICTED = {"world_size": "data_parallel_size", "seq_length": "encoder_seq_length"}
"""The argument each size must agree with, as megatron-core 0.19.2's ``validate_args`` sets it."""


@pytest.mark.parametrize("how", [*GARBLED, "contradicted"])
def test_a_garbled_missing_or_contradicted_size_stays_blank(how: str) -> None:
    """A size the block lacks, prints as no positive integer or contradicts is no size the run had: left out, the
    others shown (the nodes follow the GPUs)."""
    stem, number, _ = _recipe_row()
    args = megatron_args(stem, number, {"train_iters": 10})
    block = "\n".join(args_block(args))
    name = random.choice(["world_size", "seq_length", "global_batch_size", "micro_batch_size"])
    if how == "contradicted":
        name = random.choice(list(CONTRADICTED))
        changed = {CONTRADICTED[name]: args[CONTRADICTED[name]] * random.randint(2, 4)}
    else:
        changed = {name: f"{random.randrange(1, 99)}{GARBLED[how]}" if how == "cut" else GARBLED[how]}
    text = log_then(args, random.randint(1, 9), OOM)  # the iteration lines of the run's real sizes
    assert text.startswith(block)
    row = summarise(parse_log_text("\n".join(args_block({**args, **changed})) + text[len(block):]), Window(), 4)
    assert not row.ok
    blank = {"nodes", "gpus"} if name == "world_size" else {name}
    for field in CONFIGURATION:
        expected = None if field in blank else args["world_size"] / 4 if field == "nodes" else args[
            "world_size" if field == "gpus" else field]
        assert getattr(row, field) == expected, (field, row)


def _ok_log(args: dict) -> str:
    """A whole ten-iteration log of ``args`` at a fresh throughput of 5,000-7,000 tokens/s/GPU."""
    step_ms = args["global_batch_size"] * args["seq_length"] / random.uniform(5000, 7000) / args["world_size"] * 1000
    return megatron_log(args, [round(step_ms * random.uniform(0.99, 1.01), 1) for _ in range(10)], [120.0] * 10)


def test_a_failed_row_is_no_baseline_and_comes_last(tmp_path: Path, capsys) -> None:
    """The strong recipe's 4-node row out of memory beside ok rows on more nodes: the ok row on the fewest nodes is
    the baseline (not the failed row, now carrying the fewest nodes), every ok row is rated against it, and the
    failed row comes last without an efficiency; ``--baseline-nodes`` of the failed row falls back to that default."""
    stem = "qwen3_5_35b_a3b_mn5_strong"
    numbers = sorted(random.sample(range(2, 7), random.randint(2, 4)))
    logs = []
    for number in numbers:
        logs.append(tmp_path / f"row{number:02d}.out")
        logs[-1].write_text(_ok_log(megatron_args(stem, number)))
    failed = tmp_path / "row01.out"
    failed.write_text(log_then(megatron_args(stem, 1, {"train_iters": 10}), random.randint(1, 9), OOM))
    paths = [str(path) for path in [*logs, failed]]
    random.shuffle(paths)
    nodes = [load_recipe(EXAMPLES / f"{stem}.toml").rows[number - 1].nodes for number in numbers]
    for options in ([], ["--baseline-nodes", "4"]):
        assert main(["table", *paths, *options]) == 0
        out, err = capsys.readouterr()
        rows = _markdown_rows(out)
        assert f"| Efficiency vs {nodes[0]} nodes |" in out
        assert [row[0] for row in rows] == [*map(str, nodes), "4"]
        assert rows[0][10] == "100.0%" and all(row[10].endswith("%") for row in rows[:-1])
        assert rows[-1][:5] == ["4", "16", "4096", "4096", "2"] and rows[-1][10] == ""
        assert "no efficiency" not in err and "baseline is row" not in err
        assert ("no row on that many nodes has numbers" in err) == bool(options)
    assert main(["table", *paths, "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {line["baseline_log"] for line in table} == {str(logs[0])}
    assert table[-1]["nodes"] == "4" and table[-1]["efficiency_fraction"] == ""
