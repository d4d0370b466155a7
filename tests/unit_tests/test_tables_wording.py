"""Three slips of ``oellm table``'s text: a single-node baseline headed the efficiency column ``Efficiency vs 1 nodes``
(and the notes said ``on 1 nodes``); the attention backend read ``AttnBackend.flash`` / ``AttnBackend.auto`` (the
enum's repr megatron prints) in the CSV, the setting notes and the Setup column, where the flag and the recipes say
``flash`` / ``auto``; and one pattern that matched no file was refused as ``'...' match no file``. Generated logs,
fresh random throughputs, node counts and patterns."""

from __future__ import annotations

import csv
import io
import random
import re
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.scaling_table import TableError, Window, format_markdown, with_efficiency
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, rows_with_tokens

ATTENTION = "qwen3_5_35b_a3b_mn5_attention"


def _ok_log(args: dict) -> str:
    """A whole ten-iteration log of ``args`` at a fresh throughput of 5,000-7,000 tokens/s/GPU."""
    step_ms = args["global_batch_size"] * args["seq_length"] / random.uniform(5000, 7000) / args["world_size"] * 1000
    return megatron_log(args, [round(step_ms * random.uniform(0.99, 1.01), 1) for _ in range(10)], [120.0] * 10)


def _write(tmp_path: Path, logs: dict[str, str]) -> list[str]:
    """The logs ``{name: text}`` written to ``tmp_path``, their paths in a random order."""
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    return random.sample([str(tmp_path / name) for name in logs], len(logs))


def test_a_single_node_baseline_is_one_node(tmp_path: Path, capsys) -> None:
    """Strong-recipe runs on 16 GPUs and more read with 16 GPUs per node: the 1-node run is the baseline, a rerun of
    it ties, and a run of another attention backend on 1 node is unrated; a baseline on more nodes stays plural."""
    strong = "qwen3_5_35b_a3b_mn5_strong"
    logs = {f"{gpus}.out": _ok_log(megatron_args(strong, 2, {"world_size": gpus}))
            for gpus in [16, *random.sample([32, 64], random.randint(0, 2))]}
    logs["16-rerun.out"] = _ok_log(megatron_args(strong, 2, {"world_size": 16}))
    logs["16-auto.out"] = _ok_log(megatron_args(strong, 2, {"world_size": 16, "attention_backend": "AttnBackend.auto"}))
    assert main(["table", *_write(tmp_path, logs), "--gpus-per-node", "16"]) == 0
    out, err = capsys.readouterr()
    assert "| Efficiency vs 1 node |" in out.splitlines()[0]
    assert "on 1 node)" in err and "its workload on 1 node and" in err and "1 nodes" not in out + err
    nodes = random.choice([2, 4, 8])
    rows, baseline = with_efficiency(rows_with_tokens({nodes: random.uniform(5000, 7000)}))
    assert f"| Efficiency vs {nodes} nodes |" in format_markdown(rows, baseline, Window()).splitlines()[0]


def test_the_baseline_nodes_refusal_names_one_node(tmp_path: Path) -> None:
    """``--baseline-nodes`` of no ok row, every ok row on 1 node: ``the ok rows run on 1 node``."""
    rows = rows_with_tokens({1: random.uniform(5000, 7000)})
    other = random.choice([2, 4, 8])
    with pytest.raises(TableError, match=rf"--baseline-nodes {other}: no ok row on that many nodes \(the ok rows run "
                                         r"on 1 node\)$"):
        with_efficiency(rows, baseline_nodes=other)


def test_the_attention_backend_is_named_as_the_flag_names_it(tmp_path: Path, capsys) -> None:
    """The attention recipe's two rows on 4 nodes and a flash run on 8: the CSV column, the note on the unrated row
    and the Setup column say flash and auto."""
    logs = {f"row0{number}.out": _ok_log(megatron_args(ATTENTION, number)) for number in (1, 2)}
    logs["8n.out"] = _ok_log(megatron_args(ATTENTION, 1, {"world_size": 32, "micro_batch_size": 4}))
    paths = _write(tmp_path, logs)
    assert main(["table", *paths]) == 0
    out, err = capsys.readouterr()
    assert "AttnBackend" not in out + err
    assert "attention_backend=flash |" in out and "attention_backend=auto |" in out
    assert re.search(r"attention_backend flash in the baseline, auto in row [12]; --baseline-row", err), err
    assert main(["table", *paths, "--format", "csv"]) == 0
    table = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert {Path(line["log"]).name: line["attention_backend"] for line in table} == {
        "row01.out": "flash", "row02.out": "auto", "8n.out": "flash"}


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_pattern_that_matches_nothing_matches_no_file(count: int, tmp_path: Path, capsys) -> None:
    """One pattern ``matches`` no file; several ``match`` none."""
    patterns = [str(tmp_path / f"row{random.randrange(10, 99)}-*{index}" / "slurm-*.out") for index in range(count)]
    assert main(["table", *patterns]) == 2
    verb = "matches" if count == 1 else "match"
    assert capsys.readouterr().err.endswith(
        f"oellm table: error: no log to read: {', '.join(map(repr, patterns))} {verb} no file\n")
