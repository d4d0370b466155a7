"""``oellm table --format csv`` gives MFU and efficiency as fractions (0.116) while the markdown prints percentages
(11.6%): the CSV's ``mfu`` and ``efficiency`` headers did not say which, so 0.116 read as 0.116 %. The headers now name
the unit (``mfu_fraction``, ``efficiency_fraction``), and ``--help`` says so. Fresh random throughputs."""

from __future__ import annotations

import csv
import io
import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.scaling_table import CSV_FIELDS, format_csv, format_markdown, with_efficiency
from megatron.oellm.scaling_table.rows import Window
from tests.unit_tests.megatron_logs import rows_with_tokens


def test_the_csv_headers_name_the_fractions():
    tokens = {4: random.uniform(5000, 7000), 8: random.uniform(5000, 7000), 16: random.uniform(5000, 7000)}
    rows, baseline = with_efficiency(rows_with_tokens(tokens))
    parsed = list(csv.DictReader(io.StringIO(format_csv(rows, baseline, Window()))))
    assert "mfu_fraction" in CSV_FIELDS and "efficiency_fraction" in CSV_FIELDS
    assert "mfu" not in CSV_FIELDS and "efficiency" not in CSV_FIELDS
    assert list(parsed[0]) == CSV_FIELDS
    markdown = format_markdown(rows, baseline, Window())
    for line, row in zip(parsed, rows, strict=True):
        assert float(line["mfu_fraction"]) == pytest.approx(row.mfu, rel=1e-12) and 0 < row.mfu < 1
        assert float(line["efficiency_fraction"]) == pytest.approx(tokens[int(row.nodes)] / tokens[4], rel=1e-3)
        assert f"| {100 * row.mfu:.1f}% |" in markdown


def test_help_says_the_csv_columns_are_fractions(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["table", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "mfu_fraction and efficiency_fraction are fractions (0.116 = 11.6%)" in text


def test_help_says_peak_tflops_is_the_rows_own(capsys):
    """The CSV's ``peak_tflops`` is each row's MFU peak (its log's basis line, or ``--gpu``/``--peak-tflops``), not
    the footnote's: the help said it repeated the table's footnote on every row, like ``window``."""
    with pytest.raises(SystemExit) as stop:
        main(["table", "--help"])
    assert stop.value.code == 0
    text = "".join(capsys.readouterr().out.split())  # argparse may wrap after a hyphen: compare without spaces
    for said in ("window, statistic and baseline_log repeat the table's footnote on every row",
                 "peak_tflops is the row's own MFU peak (its log's, or --gpu/--peak-tflops)"):
        assert "".join(said.split()) in text
