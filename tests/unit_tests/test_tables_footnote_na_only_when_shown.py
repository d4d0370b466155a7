"""``oellm table``'s footnote explains an n/a TFLOP/s/GPU or MFU only when a row shows one: it printed both
clauses under every table, also when each row had its numbers. Generated logs, fresh random throughputs."""

from __future__ import annotations

import dataclasses
import random

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, format_markdown, summarise
from megatron.oellm.scaling_table.rows import DEFAULT_PEAK_TFLOPS
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

STEM = "qwen3_5_35b_a3b_mn5_strong"
UNIDENTIFIED = "(n/a: the model or its vocabulary cannot be identified from the log)"
MFU_NA = "(n/a with our TFLOP/s)"


def _row(**overrides):
    """A row of a generated 8-node log of the strong-scaling recipe, with ``overrides`` in its arguments."""
    args = megatron_args(STEM, 2, {"world_size": 32, **overrides})
    step_ms = random.uniform(60_000.0, 90_000.0)
    tflops = random.uniform(100.0, 180.0)
    return summarise(parse_log_text(megatron_log(args, [round(step_ms, 1)] * 10, [round(tflops, 1)] * 10)),
                     Window(), 4)


def test_a_table_whose_rows_all_have_numbers_explains_no_na() -> None:
    rows = [_row() for _ in range(random.randint(1, 3))]
    assert all(row.ok and row.tflops_per_gpu and row.mfu for row in rows)
    table = format_markdown(rows, None, Window())
    assert "n/a" not in table
    assert "TFLOP/s/GPU: megatron-oellm's FLOP accounting; Megatron TFLOP/s/GPU" in table
    assert f"MFU = TFLOP/s/GPU / {DEFAULT_PEAK_TFLOPS:g}. Efficiency" in table


def test_a_row_without_our_tflops_brings_both_clauses_back() -> None:
    unidentified = _row(vocab_size=None)
    assert unidentified.ok and unidentified.tflops_per_gpu is None and unidentified.mfu is None
    rows = [_row(), unidentified]
    random.shuffle(rows)
    table = format_markdown(rows, None, Window())
    assert f"megatron-oellm's FLOP accounting {UNIDENTIFIED};" in table
    assert f"MFU = TFLOP/s/GPU / {DEFAULT_PEAK_TFLOPS:g} {MFU_NA}." in table


def test_a_failed_row_without_numbers_explains_no_na() -> None:
    """A row that is not ok prints empty cells, not n/a: it gives no reason for the clauses."""
    failed = dataclasses.replace(_row(vocab_size=None), status="failed: CUDA out of memory")
    assert not failed.ok
    table = format_markdown([_row(), failed], None, Window())
    assert UNIDENTIFIED not in table and MFU_NA not in table
