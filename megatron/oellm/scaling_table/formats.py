"""The table as text: markdown in the reports' format (with a footnote on how its numbers were computed) and
CSV with every field unrounded.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence

from megatron.oellm.scaling_table.rows import DEFAULT_PEAK_TFLOPS, ScalingRow, Window


def _number(value: float | None, digits: int = 1, thousands: bool = False, percent: bool = False) -> str:
    """A cell as the reports print it ('' for no number)."""
    if value is None:
        return ""
    if percent:
        return f"{100 * value:.1f}%"
    return f"{value:,.0f}" if thousands else f"{value:.{digits}f}"


def _markdown_cell(text: str) -> str:
    """``text`` as one markdown table cell: a pipe (a hybrid layer pattern's pipeline stages in a crash message, a
    log path) escaped, so it does not end the cell and shift the row's later cells out of their columns."""
    return text.replace("|", "\\|")


def format_markdown(rows: Sequence[ScalingRow], baseline: ScalingRow | None, window: Window,
                    peak_tflops: float = DEFAULT_PEAK_TFLOPS, peak_note: str = "") -> str:
    """The table in the reports' markdown format, with a footnote on how the numbers were computed; ``peak_note``
    (the GPU's, e.g. the GH200 power cap) follows the MFU's denominator."""
    base = f"{baseline.nodes:g} nodes" if baseline else "baseline"
    header = ["Nodes", "GPUs", "GBS", "MBS", "Step time (s)", "Tokens/s/GPU", "TFLOP/s/GPU",
              "Megatron TFLOP/s/GPU", "MFU", f"Efficiency vs {base}", "Model", "Log", "Status"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [f"{row.nodes:g}" if row.nodes is not None else "", str(row.gpus or ""),
                 str(row.global_batch_size or ""), str(row.micro_batch_size or ""), _number(row.step_time_s),
                 _number(row.tokens_per_s_per_gpu, thousands=True),
                 _number(row.tflops_per_gpu) or ("n/a" if row.ok else ""), _number(row.tflops_per_gpu_logged),
                 _number(row.mfu, percent=True) or ("n/a" if row.ok else ""), _number(row.efficiency, percent=True),
                 row.model, row.log,
                 row.status]
        lines.append("| " + " | ".join(_markdown_cell(cell) for cell in cells) + " |")
    lines += ["", f"{window.statistic.capitalize()}s over iterations {window}. TFLOP/s/GPU: megatron-oellm's FLOP "
              "accounting (n/a: the model or its vocabulary cannot be identified from the log); Megatron TFLOP/s/GPU: "
              "the logged value, megatron's formula on the run's flags (docs/flops.md compares both counts with the "
              f"reports'). MFU = TFLOP/s/GPU / {peak_tflops:g}{f' ({peak_note})' if peak_note else ''} (n/a with "
              "our TFLOP/s). Efficiency: tokens/s/GPU "
              "relative to the baseline row, for the rows of its model and sequence length and of its global batch size "
              "(strong scaling) or global batch size per GPU (weak scaling)."]
    if window.statistic == "mean":  # the median of the rates is the rate of the median step time; means differ
        lines[-1] += (" Step time, tokens/s/GPU and TFLOP/s/GPU come from the mean step time, Megatron TFLOP/s/GPU is "
                      "the mean of the logged per-iteration values (as the reports' mean rows give it): a slow "
                      "iteration lowers the first more, so the two TFLOP/s columns differ by more than the two FLOP "
                      "counts do.")
    return "\n".join(lines)


CSV_FIELDS = [f.name for f in dataclasses.fields(ScalingRow) if f.name != "model_key"]
"""CSV columns: every :class:`ScalingRow` field but the internal :attr:`ScalingRow.model_key`, unrounded."""


def format_csv(rows: Sequence[ScalingRow]) -> str:
    """The table as CSV with unrounded numbers (empty cells where a row has none)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(k, getattr(row, k)) for k in CSV_FIELDS})
    return out.getvalue()


def _csv_cell(field: str, value: object) -> object:
    """One CSV cell: empty for None; a whole number of nodes as an integer (``4``, not ``4.0``, which a join on
    a node count read as text would miss), a partial node as its fraction (``0.25``)."""
    if value is None:
        return ""
    if field == "nodes" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value
