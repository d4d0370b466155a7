"""A parsed log -> one :class:`~megatron.oellm.scaling_table.rows.ScalingRow`; the rows' order, the
baseline and the scaling efficiency against it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from megatron.oellm.peaks import mfu
from megatron.oellm.run_log import RunLog
from megatron.oellm.scaling_table.identify import (
    VOCAB_ARGUMENTS,
    corrected_flops_per_token,
    garbled_integer_problem,
    identify_model,
    logged_padded_vocab,
    model_key,
    run_arguments,
)
from megatron.oellm.scaling_table.rows import DEFAULT_PEAK_TFLOPS, FlopsPerToken, ScalingRow, TableError, Window
from megatron.oellm.scaling_table.window import per_iteration, window_lines, window_run, window_status


def summarise(log: RunLog, window: Window, gpus_per_node: int, peak_tflops: float = DEFAULT_PEAK_TFLOPS,
              flops_per_token: FlopsPerToken = corrected_flops_per_token) -> ScalingRow:
    """One :class:`ScalingRow` from a parsed log, read with the arguments of the window's run (:func:`window_run`):
    the window's medians (or means), or a status and no numbers. Our TFLOP/s and the MFU need the model's card and
    are None without it."""
    run = window_run(log, window)
    args = run_arguments(run)
    model, card = identify_model(args) if args else ("unknown model", None)
    status = window_status(log, window)
    if status != "ok":
        return ScalingRow(log.path, model, status)
    key = model_key(args, card)
    lines = window_lines(log, window)
    step_time = window.summarise(per_iteration(window, lines, [line.elapsed_ms for line in lines])) / 1000.0
    logged_batch = next((line.global_batch_size for line in lines if line.global_batch_size is not None), None)
    global_batch = logged_batch if logged_batch is not None else args.get("global_batch_size")
    world_size, seq_length = args.get("world_size"), args.get("seq_length")
    if not all(isinstance(value, int) and value > 0 for value in (world_size, seq_length, global_batch)):
        return ScalingRow(log.path, model, "arguments block lacks a positive world_size, seq_length or "
                                           "global_batch_size", model_key=key)
    tokens = global_batch * seq_length / step_time / world_size
    logged = [line.tflops_per_gpu for line in lines]  # on every line or none (_value_problem)
    tflops_logged = window.summarise(per_iteration(window, lines, logged)) if None not in logged else None
    tflops = None
    if card is not None:
        vocab = run.vocabulary[1] if run.vocabulary is not None else None  # the size megatron built
        if vocab is None:
            if problem := garbled_integer_problem(args, VOCAB_ARGUMENTS):
                return ScalingRow(log.path, model, problem, model_key=key)
            vocab = logged_padded_vocab(args)
        if vocab is not None:
            tflops = flops_per_token(card, seq_length, vocab) * tokens / 1e12
    return ScalingRow(
        log.path, model, "ok", nodes=world_size / gpus_per_node, gpus=world_size, global_batch_size=global_batch,
        micro_batch_size=args.get("micro_batch_size"), seq_length=seq_length, step_time_s=step_time,
        tokens_per_s_per_gpu=tokens, tflops_per_gpu=tflops, tflops_per_gpu_logged=tflops_logged,
        mfu=None if tflops is None else mfu(tflops, peak_tflops), model_key=key)


def sorted_rows(rows: Sequence[ScalingRow]) -> list[ScalingRow]:
    """``rows`` in the printed order: rows with numbers by model (name, then :attr:`ScalingRow.model_key`), global
    batch size and nodes (a scaling series
    reads top to bottom whatever order the shell listed the logs in), then rows without numbers in their given
    order."""
    def key(row: ScalingRow) -> tuple:
        return (0, row.model, row.model_key, row.global_batch_size, row.nodes) if row.ok else (1,)

    return sorted(rows, key=key)


def comparable(row: ScalingRow, baseline: ScalingRow) -> bool:
    """``row`` has numbers, trains the baseline's model (name and :attr:`ScalingRow.model_key`: two models that match
    no card are both ``unregistered model``) at its sequence length, and has either the baseline's global
    batch size (strong scaling) or its global batch size per GPU (weak scaling): only then is its tokens/s/GPU
    relative to the baseline's a scaling efficiency (another model, length or batch is another workload, e.g. a
    strong-scaling run at GBS 4096 against the GBS-256 start of a weak-scaling series in the same table): the two
    share a series (:func:`series_of`)."""
    return row.ok and not set(series_of(row)).isdisjoint(series_of(baseline))


def series_of(row: ScalingRow) -> tuple[tuple, tuple]:
    """The strong- and the weak-scaling series ``row`` (an ok row) belongs to, as ``(kind, model, model key, sequence
    length, batch)``: its model and sequence length with its global batch size, or with its global batch size per
    GPU."""
    workload = (row.model, row.model_key, row.seq_length)
    return ("strong", *workload, row.global_batch_size), ("weak", *workload, Fraction(row.global_batch_size, row.gpus))


def _series_sizes(ok: Sequence[ScalingRow]) -> Counter:
    """How many of the ``ok`` rows each series holds, the series in the order the rows first name them."""
    return Counter(series for row in ok for series in series_of(row))


def _largest_series_first(candidates: Sequence[ScalingRow], ok: Sequence[ScalingRow]) -> ScalingRow:
    """The first of ``candidates`` whose larger series holds the most ``ok`` rows: in a table of several models or
    batch sizes (a glob over every recipe's runs, a ``--local`` smoke test beside the cluster rows) the baseline
    belongs to the largest series, not to whichever run has the fewest nodes."""
    sizes = _series_sizes(ok)
    return max(candidates, key=lambda row: max(sizes[series] for series in series_of(row)))


def _default_baseline(ok: Sequence[ScalingRow]) -> ScalingRow | None:
    """The run on the fewest nodes of the largest series, strong or weak (the first of equals, in the table's order):
    the start of the table's main series, whose every run it rates, never a run in the middle of a weak-scaling
    series that also starts a short strong one."""
    sizes = _series_sizes(ok)
    if not sizes:
        return None
    largest = max(sizes, key=sizes.__getitem__)  # max keeps the first of equals
    return min((row for row in ok if largest in series_of(row)), key=lambda row: row.nodes)


def with_efficiency(rows: Sequence[ScalingRow], baseline_row: int | None = None,
                    baseline_nodes: float | None = None) -> tuple[list[ScalingRow], ScalingRow | None]:
    """``rows`` with tokens/s/GPU relative to the baseline (the :func:`comparable` rows; the others get none), and the
    baseline (the returned list's row): ``baseline_row`` (1-based), else the row on ``baseline_nodes`` nodes of the
    largest series, else the run on the fewest nodes of the largest series (:func:`_default_baseline`; None if no row
    is ok)."""
    ok = [row for row in rows if row.ok]
    if baseline_row is not None:
        if not 1 <= baseline_row <= len(rows):
            raise TableError(f"--baseline-row {baseline_row}: the table has rows 1..{len(rows)}")
        baseline = rows[baseline_row - 1]
        if not baseline.ok:
            raise TableError(f"--baseline-row {baseline_row} has no numbers ({baseline.status}); pick an ok row")
    elif baseline_nodes is not None:
        matching = [row for row in ok if row.nodes == baseline_nodes]
        if not matching:
            nodes = ", ".join(f"{n:g}" for n in sorted({row.nodes for row in ok}))
            found = f"the ok rows run on {nodes} nodes" if ok else "the table has no ok row"
            raise TableError(f"--baseline-nodes {baseline_nodes:g}: no ok row on that many nodes ({found})")
        baseline = _largest_series_first(matching, ok)
    else:
        baseline = _default_baseline(ok)
    if baseline is None:
        return list(rows), None
    rated = [dataclasses.replace(row, efficiency=row.tokens_per_s_per_gpu / baseline.tokens_per_s_per_gpu)
             if comparable(row, baseline) else row for row in rows]
    return rated, next(new for old, new in zip(rows, rated, strict=True) if old is baseline)


def unrated_rows_note(rows: Sequence[ScalingRow], baseline: ScalingRow | None) -> str | None:
    """One ``note:`` line naming the ok rows of the printed ``rows`` that got no efficiency, being no workload of the
    baseline's (:func:`comparable`), or None when every ok row is rated: an empty cell must not read as a lost
    number."""
    if baseline is None:
        return None
    unrated = [number for number, row in enumerate(rows, 1) if row.ok and row.efficiency is None]
    if not unrated:
        return None
    number = next(number for number, row in enumerate(rows, 1) if row is baseline)
    listed_rows = f"row {unrated[0]} has" if len(unrated) == 1 else f"rows {', '.join(map(str, unrated))} have"
    return (f"note: {listed_rows} no efficiency: another model, sequence length or global batch size (per GPU) than "
            f"the baseline, row {number} ({baseline.model}, seq {baseline.seq_length}, GBS "
            f"{baseline.global_batch_size} on {baseline.nodes:g} nodes); --baseline-row N rates another series")


def baseline_ties_note(rows: Sequence[ScalingRow], baseline: ScalingRow | None) -> str | None:
    """One ``note:`` line naming the baseline among the printed ``rows`` and the other rows that run its workload
    (:func:`comparable`) on as many nodes, or None when there are none. Such a row (a resubmitted job's second log,
    a rerun) would give other efficiencies, and the baseline was picked over it by order alone."""
    if baseline is None:
        return None
    ties = [number for number, row in enumerate(rows, 1)
            if row is not baseline and row.nodes == baseline.nodes and comparable(row, baseline)]
    if not ties:
        return None
    number = next(number for number, row in enumerate(rows, 1) if row is baseline)
    others = ", ".join(f"row {tie} ({rows[tie - 1].log})" for tie in ties)
    return (f"note: the efficiency baseline is row {number} ({baseline.log}); {others} also run"
            f"{'s' if len(ties) == 1 else ''} its workload on {baseline.nodes:g} nodes and would give other "
            "efficiencies: --baseline-row N picks one (rows numbered as printed)")
