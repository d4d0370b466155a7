"""``oellm table`` prints each row's sequence length and sorts by it before the global batch size: the Qwen3-30B
report's table mixes 4k, 8k and 24k runs, which read as one list sorted by batch size with no column telling their
lengths apart. Generated logs of that recipe's rows, fresh random throughputs."""

from __future__ import annotations

import csv
import io
import random

from megatron.oellm.recipes import load_recipe
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, format_csv, format_markdown, sorted_rows, summarise, with_efficiency
from tests.unit_tests.megatron_logs import EXAMPLES, megatron_args, megatron_log

STEM = "qwen3_30b_a3b_mn5"


def _rows() -> list:
    """Rows of generated logs of the Qwen3-30B recipe's rows (seq 4096, 8192 and 24576), in a shuffled order."""
    recipe = load_recipe(EXAMPLES / f"{STEM}.toml")
    rows = []
    for number, recipe_row in enumerate(recipe.rows, 1):
        args = megatron_args(STEM, number, {"world_size": recipe_row.nodes * 4})
        tokens = random.uniform(4000, 7500)
        step_ms = args["global_batch_size"] * args["seq_length"] / tokens / args["world_size"] * 1000
        text = megatron_log(args, [round(step_ms, 1)] * 10, [150.0] * 10)
        rows.append(summarise(parse_log_text(text, f"row{number:02d}.out"), Window(), 4))
    random.shuffle(rows)
    return rows


def test_rows_are_sorted_by_sequence_length_before_the_batch_size():
    rows = sorted_rows(_rows())
    assert all(row.ok for row in rows)
    keys = [(row.seq_length, row.global_batch_size, row.nodes) for row in rows]
    assert keys == sorted(keys)
    assert {row.seq_length for row in rows} == {4096, 8192, 24576}


def test_the_markdown_table_has_a_seq_column_and_the_csv_its_seq_length():
    rows, baseline = with_efficiency(sorted_rows(_rows()))
    lines = format_markdown(rows, baseline, Window()).splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[:5] == ["Nodes", "GPUs", "Seq", "GBS", "MBS"]
    for line, row in zip(lines[2:2 + len(rows)], rows, strict=True):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[:5] == [f"{row.nodes:g}", str(row.gpus), str(row.seq_length), str(row.global_batch_size),
                             str(row.micro_batch_size)]
    parsed = list(csv.DictReader(io.StringIO(format_csv(rows, baseline, Window()))))
    assert [int(line["seq_length"]) for line in parsed] == [row.seq_length for row in rows]
