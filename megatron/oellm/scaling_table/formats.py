"""The table as text: markdown in the reports' format (with a footnote on how its numbers were computed) and
CSV with every field unrounded.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence

from megatron.oellm.peaks import GPU_PEAKS, peak_text
from megatron.oellm.scaling_table.identify import GQA_OFF
from megatron.oellm.scaling_table.rows import (
    DEFAULT_GPU,
    DEFAULT_PEAK_TFLOPS,
    RowPeak,
    ScalingRow,
    Window,
    node_count,
)
from megatron.oellm.scaling_table.summary import BENCHMARK_SETTINGS, setting_applies, varying_settings


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
                    peak_tflops: float = DEFAULT_PEAK_TFLOPS, peak_note: str = "",
                    gpu: str | None = DEFAULT_GPU) -> str:
    """The table in the reports' markdown format, with a footnote on how the numbers were computed; ``peak_note``
    (the GPU's, e.g. the GH200 power cap) follows the MFU's denominator, the dense BF16 peak of ``gpu`` (None: a peak
    the user gave), which FP8 rows are rated against too (:func:`_fp8_note`); rows whose logs name their own peak
    (:class:`~megatron.oellm.scaling_table.rows.RowPeak`) are said to be against it (:func:`_mfu_peaks`). Where the
    rows differ in a benchmark
    setting, a Setup column after the model gives each row's values of those settings (:func:`setup_settings`)."""
    base = node_count(baseline.nodes) if baseline else "baseline"
    setup = setup_settings(rows)
    header = ["Nodes", "GPUs", "Seq", "GBS", "MBS", "Step time (s)", "Tokens/s/GPU", "TFLOP/s/GPU",
              "Megatron TFLOP/s/GPU", "MFU", f"Efficiency vs {base}", "Model", *(["Setup"] if setup else []), "Log",
              "Status"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    marked = _mixes_strong_and_weak(rows)
    for row in rows:
        cells = [f"{row.nodes:g}" if row.nodes is not None else "", str(row.gpus or ""), str(row.seq_length or ""),
                 str(row.global_batch_size or ""), str(row.micro_batch_size or ""), _number(row.step_time_s),
                 _number(row.tokens_per_s_per_gpu, thousands=True),
                 _number(row.tflops_per_gpu) or ("n/a" if row.ok else ""), _number(row.tflops_per_gpu_logged),
                 _number(row.mfu, percent=True) or ("n/a" if row.ok else ""), _efficiency_cell(row, marked),
                 row.model, *([_setup_cell(row, setup)] if setup else []), row.log,
                 row.status]
        lines.append("| " + " | ".join(_markdown_cell(cell) for cell in cells) + " |")
    unidentified = " (n/a: the model or its vocabulary cannot be identified from the log)"
    tflops_na = unidentified if _has_na(rows, "tflops_per_gpu") else ""
    mfu_na = " (n/a with our TFLOP/s)" if _has_na(rows, "mfu") else ""
    mfu_peak, peak_tflops, gpu = _mfu_peaks(rows, peak_tflops, peak_note, gpu)
    lines += ["", f"{_statistic_sentence(rows, window)} TFLOP/s/GPU: megatron-oellm's FLOP "
              f"accounting{tflops_na}; Megatron TFLOP/s/GPU: "
              "the logged rate (megatron's formula on the run's flags; docs/flops.md compares both counts with the "
              "reports') as FLOPs per iteration (rate x iteration time), summarised like the step time and divided "
              "by it, so that the two TFLOP/s columns differ by the two FLOP counts only. "
              f"MFU = TFLOP/s/GPU / {mfu_peak}{mfu_na}. "
              "Efficiency: tokens/s/GPU "
              "relative to the baseline row, for the rows of its model, sequence length and benchmark settings that "
              "are no scaling dimension (routing forced or real, token dispatcher and its backend, attention backend, "
              "recompute, FP8) and of its global batch size (strong scaling) or global batch size per GPU (weak "
              f"scaling).{_marker_note(marked)}{_varying_settings_note(rows)}{_fp8_note(rows, peak_tflops, gpu)}"
              f"{_gqa_note(rows)}"]
    if window.statistic == "mean":  # the reports' mean rows average the rates: a mean of 1/t, above these
        lines[-1] += (" The reports' mean rows give the mean of the logged rates, which jittery iterations raise above "
                      "the rate at the mean step time.")
    return "\n".join(lines)


def setup_settings(rows: Sequence[ScalingRow]) -> list[str]:
    """The benchmark settings (:attr:`ScalingRow.settings`) whose value differs between ``rows`` with an arguments
    block, failed ones too, in :data:`~megatron.oellm.scaling_table.summary.BENCHMARK_SETTINGS` order, a value
    counting only in the rows that read it (:func:`setting_applies`): what the markdown's Setup column shows, as rows
    that differ only in a setting (forced or real routing, the attention backend) read alike in every other column."""
    values: dict[str, set[str]] = {}
    for row in rows:
        for name, value in row.settings:
            if setting_applies(name, dict(row.settings)):
                values.setdefault(name, set()).add(value)
    return [name for name in BENCHMARK_SETTINGS if len(values.get(name, ())) > 1]


def _setup_cell(row: ScalingRow, setup: Sequence[str]) -> str:
    """The Setup cell of ``row``: ``NAME=VALUE`` for each of the ``setup`` settings the row's run reads, comma-separated
    ('' for a row whose log has no arguments block)."""
    settings = dict(row.settings)
    return ", ".join(f"{name}={settings[name]}" for name in setup
                     if name in settings and setting_applies(name, settings))


def _mixes_strong_and_weak(rows: Sequence[ScalingRow]) -> bool:
    """Whether the efficiency column rates rows of both the baseline's strong and weak series: only then does each
    cell say which (:func:`_efficiency_cell`), as the reports print the two in tables of their own."""
    return {"strong", "weak"} <= {row.scaling for row in rows}


def _efficiency_cell(row: ScalingRow, marked: bool) -> str:
    """The efficiency as a percentage, followed by ``(strong)`` or ``(weak)`` when the column is ``marked``."""
    cell = _number(row.efficiency, percent=True)
    return f"{cell} ({row.scaling})" if marked and row.scaling in ("strong", "weak") else cell


def _marker_note(marked: bool) -> str:
    """The footnote's sentence on the efficiency column's markers ('' without them)."""
    if not marked:
        return ""
    return (" (strong) and (weak) name the baseline's series that rates a row: the same global batch size, or the "
            "same global batch size per GPU.")


def _statistic_sentence(rows: Sequence[ScalingRow], window: Window) -> str:
    """The footnote's first sentence: ``Medians over iterations 3-10.``, or, where the ok rows' log lines average
    several iterations each (:attr:`ScalingRow.line_iterations`), ``Medians of 10-iteration means ...``: a median
    over one line per ten iterations is no median of the iterations' own times."""
    statistic = window.statistic.capitalize()
    counts = sorted({count for row in rows if row.ok for count in row.line_iterations})
    if all(count == 1 for count in counts):
        return f"{statistic}s over iterations {window}."
    if len(counts) == 1:
        return (f"{statistic}s of {counts[0]}-iteration means over iterations {window}: megatron's log lines average "
                f"{counts[0]} iterations each (the log interval).")
    return (f"{statistic}s of N-iteration means over iterations {window}, N = {', '.join(map(str, counts))}: "
            "megatron's log lines average the iterations since the line before (the log interval), each line counted "
            "once for each iteration it averages.")


def _mfu_peaks(rows: Sequence[ScalingRow], peak_tflops: float, peak_note: str,
               gpu: str | None) -> tuple[str, float | None, str | None]:
    """The footnote's MFU denominator and the (peak, GPU) the FP8 sentence names (a None peak: the rows' peaks
    differ). Unless a row's peak is its log's own (the ``[oellm] throughput basis`` line), the table's ``peak_tflops``
    with ``peak_note``, as ever; the logs' peak where every ok row has the same one from its log; else each row's, so
    that rows of different peaks (or of a log that names none) are never mixed without a word."""
    peaks = [(number, row.peak) for number, row in enumerate(rows, 1) if row.ok and row.peak is not None]
    if not any(peak.log_has_basis for _, peak in peaks):
        return f"{peak_text(peak_tflops)}{f' ({peak_note})' if peak_note else ''}", peak_tflops, gpu
    distinct = {(peak.tflops, peak.gpu) for _, peak in peaks}
    if len(distinct) == 1 and all(peak.from_log for _, peak in peaks):
        peak = peaks[0][1]
        note = f"; {GPU_PEAKS[peak.gpu].note}" if peak.gpu is not None and GPU_PEAKS[peak.gpu].note else ""
        return _row_peak_text(peak, "as the logs' [oellm] lines") + note, peak.tflops, peak.gpu
    groups: dict[str, list[int]] = {}
    for number, peak in peaks:
        groups.setdefault(_row_peak_text(peak, "its log's"), []).append(number)
    each = "; ".join(f"{text} for row{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"
                     for text, numbers in groups.items())
    notes = dict.fromkeys(GPU_PEAKS[peak.gpu].note for _, peak in peaks
                          if peak.gpu is not None and GPU_PEAKS[peak.gpu].note)  # the GH200 power cap's
    return f"each row's peak: {each}{''.join(f'; {note}' for note in notes)}", None, None


def _row_peak_text(peak: RowPeak, whose: str) -> str:
    """A row's peak as the footnote names it: TFLOP/s, GPU and precision, and where it came from (``whose``: the
    log's, said of a peak from its basis line)."""
    if peak.from_log:
        return (f"{peak_text(peak.tflops)} ({peak.gpu} dense bf16, {whose})" if peak.gpu is not None
                else f"{peak_text(peak.tflops)} (--oellm-peak-tflops, {whose})")
    why = "its log names no peak" if peak.logged is None else "its log computes no MFU"
    return f"{peak_text(peak.tflops)} ({peak.gpu} dense bf16, the default: {why})"


def _fp8_note(rows: Sequence[ScalingRow], peak_tflops: float | None, gpu: str | None) -> str:
    """The footnote's sentence on the ok rows of FP8 runs (``fp8`` set in their arguments), '' when there are none:
    their MFU is against the same peak as the others' (the reports rate every run against the BF16 peak; a None
    ``peak_tflops``: each row's own), while ``oellm flops --precision fp8`` divides by the GPU's dense FP8 peak, so
    one run would show two MFUs without it."""
    fp8 = [number for number, row in enumerate(rows, 1) if row.ok and is_fp8(row)]
    if not fp8:
        return ""
    which = f"run (row {fp8[0]})" if len(fp8) == 1 else f"runs (rows {', '.join(map(str, fp8))})"
    if peak_tflops is None:
        return (f" The MFU of the FP8 {which} is against its row's peak above, a dense BF16 one, as the reports rate "
                "it; `oellm flops --precision fp8` divides by the GPU's dense FP8 peak instead.")
    if gpu is None:
        return (f" The MFU of the FP8 {which} is against the same {peak_text(peak_tflops)} TFLOP/s; `oellm flops "
                "--precision fp8` divides by the GPU's dense FP8 peak instead.")
    fp8_peak = GPU_PEAKS[gpu].fp8_tflops
    if fp8_peak is None:  # a GPU without FP8 (A100): no second MFU to compare with
        return (f" The MFU of the FP8 {which} is against the same {peak_text(peak_tflops)} TFLOP/s, the {gpu}'s dense "
                "BF16 peak, as the reports rate it.")
    return (f" The MFU of the FP8 {which} is against the dense BF16 peak too, as the reports rate it; `oellm "
            f"flops --gpu {gpu} --precision fp8` divides by the dense FP8 peak, {peak_text(fp8_peak)} TFLOP/s, instead: for the "
            f"same run its MFU is {peak_tflops / fp8_peak:.2f} x this one.")


def _gqa_note(rows: Sequence[ScalingRow]) -> str:
    """The footnote's sentence on the rows whose model is named as a registry card but without grouped-query
    attention (:data:`~megatron.oellm.scaling_table.identify.GQA_OFF`), '' when there are none: both TFLOP/s columns
    count the multi-head model megatron built, which docs/flops.md weighs against the reports' Qwen3-30B-A3B rows."""
    if not any(GQA_OFF in row.model for row in rows):
        return ""
    return (f" A model \"but {GQA_OFF}\" ran without --group-query-attention: megatron-core 0.19.2 then builds "
            "multi-head attention whatever --num-query-groups says, and both TFLOP/s columns count it (docs/flops.md, "
            "\"How far the MN5 tables are from the corrected count, and why\").")


def is_fp8(row: ScalingRow) -> bool:
    """The row's run trained in FP8: its arguments block sets ``fp8`` (``hybrid``, ``e4m3``; unset prints None)."""
    return dict(row.settings).get("fp8", "None") not in ("None", "False", "")


def _has_na(rows: Sequence[ScalingRow], field: str) -> bool:
    """Whether the table prints n/a in the column of :class:`ScalingRow` ``field`` (``tflops_per_gpu``, ``mfu``): an ok
    row without that number. The footnote explains an n/a only where the table shows one."""
    return any(row.ok and getattr(row, field) is None for row in rows)


def _varying_settings_note(rows: Sequence[ScalingRow]) -> str:
    """The footnote's sentence naming the benchmark settings the table's rows differ in ('' when none)."""
    varying = varying_settings(rows)
    if not varying:
        return ""
    if len(varying) == 1:
        return f" These rows differ in {varying[0]}, so each of its values is a series of its own."
    return f" These rows differ in {', '.join(varying)}, so each combination of their values is a series of its own."


CSV_HEADERS = {"mfu": "mfu_fraction", "efficiency": "efficiency_fraction"}
"""CSV headers of the :class:`ScalingRow` fields that are fractions (0.116 where the markdown prints 11.6%)."""

_CSV_ROW_FIELDS = [f.name for f in dataclasses.fields(ScalingRow)
                   if f.name not in ("model_key", "settings", "line_iterations", "peak")]

CSV_TABLE_FIELDS = ["window", "statistic", "peak_tflops", "baseline_log"]
"""CSV columns that hold what the markdown's footnote says, on each row, so that rows joined from several tables keep
how their numbers were computed: the iteration window, its statistic, the row's MFU peak (TFLOP/s per GPU: the
table's, or its log's own, :class:`~megatron.oellm.scaling_table.rows.RowPeak`) and the log of the efficiency's
baseline row."""

CSV_FIELDS = [*(CSV_HEADERS.get(name, name) for name in _CSV_ROW_FIELDS), *CSV_TABLE_FIELDS, *BENCHMARK_SETTINGS]
"""CSV columns: every :class:`ScalingRow` field but the internal :attr:`ScalingRow.model_key`,
:attr:`ScalingRow.settings`, :attr:`ScalingRow.line_iterations` and :attr:`ScalingRow.peak` (its TFLOP/s is the
``peak_tflops`` column), unrounded, the MFU and the efficiency as
fractions (:data:`CSV_HEADERS`); then :data:`CSV_TABLE_FIELDS`; then the run's benchmark settings, one column each
(:data:`~megatron.oellm.scaling_table.summary.BENCHMARK_SETTINGS`, as its arguments block prints them, ``None`` for
one the run does not read, such as a BF16 run's FP8 recipe; for a failed run too; empty for a row whose log has no
arguments block)."""


def format_csv(rows: Sequence[ScalingRow], baseline: ScalingRow | None, window: Window,
               peak_tflops: float = DEFAULT_PEAK_TFLOPS) -> str:
    """The table as CSV with unrounded numbers (empty cells where a row has none), headed :data:`CSV_FIELDS`; the
    table's window and baseline and each row's peak on every row, where the markdown says them in its footnote."""
    baseline_log = baseline.log if baseline is not None else ""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for row in rows:
        settings = dict(row.settings)
        peak = row.peak.tflops if row.peak is not None else peak_tflops  # a row's own: its log's peak
        writer.writerow([*(_csv_cell(name, getattr(row, name)) for name in _CSV_ROW_FIELDS), str(window),
                         window.statistic, peak, baseline_log,
                         *(settings.get(name, "") for name in BENCHMARK_SETTINGS)])
    return out.getvalue()


def _csv_cell(field: str, value: object) -> object:
    """One CSV cell: empty for None; a whole number of nodes as an integer (``4``, not ``4.0``, which a join on
    a node count read as text would miss), a partial node as its fraction (``0.25``)."""
    if value is None:
        return ""
    if field == "nodes" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value
