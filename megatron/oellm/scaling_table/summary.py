"""A parsed log -> one :class:`~megatron.oellm.scaling_table.rows.ScalingRow`; the rows' order, the
baseline and the scaling efficiency against it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from megatron.oellm.peaks import mfu, peak_text
from megatron.oellm.run_log import IterationLine, RunLog
from megatron.oellm.scaling_table.identify import (
    VOCAB_ARGUMENTS,
    corrected_flops_per_token,
    garbled_integer_problem,
    identify_model,
    logged_padded_vocab,
    model_key,
    run_arguments,
)
from megatron.oellm.scaling_table.rows import (
    DEFAULT_PEAK_TFLOPS,
    DEFAULT_ROW_PEAK,
    FlopsPerToken,
    RowPeak,
    ScalingRow,
    TableError,
    Window,
    is_positive_int,
    node_count,
)
from megatron.oellm.scaling_table.window import (
    line_iterations,
    per_iteration,
    window_lines,
    window_run,
    window_status,
    with_stop_note,
)
from megatron.oellm.training.throughput import LoggedPeak


def summarise(log: RunLog, window: Window, gpus_per_node: int, peak_tflops: float = DEFAULT_PEAK_TFLOPS,
              flops_per_token: FlopsPerToken = corrected_flops_per_token) -> ScalingRow:
    """One :class:`ScalingRow` from a parsed log, read with the arguments of the window's run (:func:`window_run`):
    the window's medians (or means), or a status and no numbers (also for numbers :func:`implausible_numbers`
    refuses); a run SLURM stopped, or that failed, after the window keeps its numbers and says how it ended
    (:func:`with_stop_note`). A row without numbers keeps the run's configuration (:func:`failed_row`). Our TFLOP/s
    and the MFU need the model's card and are None without it."""
    run = window_run(log, window)
    args = run_arguments(run)
    model, card = identify_model(args) if args else ("unknown model", None)
    status = window_status(log, window)
    if status != "ok":
        return failed_row(log.path, model, status, args, gpus_per_node)
    key = model_key(args, card)
    settings = benchmark_settings(args)
    lines = window_lines(log, window)
    step_time = window.summarise(per_iteration(window, lines, [line.elapsed_ms for line in lines])) / 1000.0
    logged_batch = next((line.global_batch_size for line in lines if line.global_batch_size is not None), None)
    global_batch = logged_batch if logged_batch is not None else args.get("global_batch_size")
    world_size, seq_length = args.get("world_size"), args.get("seq_length")
    if not all(isinstance(value, int) and value > 0 for value in (world_size, seq_length, global_batch)):
        return failed_row(log.path, model, "arguments block lacks a positive world_size, seq_length or "
                          "global_batch_size", args, gpus_per_node, key)
    tokens = global_batch * seq_length / step_time / world_size
    tflops_logged = logged_tflops(window, lines, step_time)
    tflops = None
    if card is not None:
        vocab = run.vocabulary[1] if run.vocabulary is not None else None  # the size megatron built
        if vocab is None:
            if problem := garbled_integer_problem(args, VOCAB_ARGUMENTS):
                return failed_row(log.path, model, problem, args, gpus_per_node, key)
            vocab = logged_padded_vocab(args)
        if vocab is not None:
            tflops = flops_per_token(card, seq_length, vocab) * tokens / 1e12
    row = ScalingRow(
        log.path, model, "ok", nodes=world_size / gpus_per_node, gpus=world_size, global_batch_size=global_batch,
        micro_batch_size=args.get("micro_batch_size"), seq_length=seq_length, step_time_s=step_time,
        tokens_per_s_per_gpu=tokens, tflops_per_gpu=tflops, tflops_per_gpu_logged=tflops_logged,
        mfu=None if tflops is None else mfu(tflops, peak_tflops), model_key=key, settings=settings,
        line_iterations=line_iterations(window, lines))
    if problem := implausible_numbers(row, args, gpus_per_node, peak_tflops):
        return failed_row(log.path, model, problem, args, gpus_per_node, key)
    return with_stop_note(row, run, window)


def row_peak(logged: LoggedPeak | None, given: RowPeak | None) -> RowPeak:
    """The peak of a row whose run's ``[oellm] throughput basis`` line names ``logged`` (None: no such line): the
    user's ``given`` one (``--gpu``, ``--peak-tflops``) wins; else the log's, so that the table's MFU is against the
    peak the log's ``[oellm]`` lines rated it against; else the reports' default (also where the log computed no
    MFU)."""
    if given is not None:
        return dataclasses.replace(given, logged=logged)
    if logged is not None and logged.tflops is not None:
        return RowPeak(logged.tflops, logged.gpu, logged=logged)
    return dataclasses.replace(DEFAULT_ROW_PEAK, logged=logged)


def given_peak_note(log: str, peak: RowPeak) -> str:
    """A ``note:`` line when the user's peak (``--gpu``, ``--peak-tflops``) is not the one the log's ``[oellm]``
    lines rate MFU against, so that the two MFUs of one run are not taken for a discrepancy; '' otherwise."""
    logged = peak.logged
    if not peak.given or logged is None or logged.tflops is None or logged.tflops == peak.tflops:
        return ""
    theirs = f"{logged.gpu} dense bf16 " if logged.gpu is not None else ""
    ours = f"--gpu {peak.gpu}" if peak.gpu is not None else "--peak-tflops"
    return (f"note: {log}: its [oellm] lines' MFU is against {theirs}{peak_text(logged.tflops)} TFLOP/s (its "
            f"throughput basis line); the table's is against {peak_text(peak.tflops)} ({ours})")


def logged_tflops(window: Window, lines: Sequence[IterationLine], step_time_s: float) -> float | None:
    """Megatron's logged TFLOP/s/GPU over the window, summarised as the step time ``step_time_s`` (seconds) is: the
    window's FLOPs per GPU per iteration (a line's logged rate times its time per iteration; megatron-core 0.19.2
    logs one iteration's FLOPs over the mean time of the iterations a line averages, each counted once per
    iteration, :func:`per_iteration`), summarised by the window's statistic, over ``step_time_s``. With a constant
    FLOP count it is that count over the step time under median and mean alike, so the two TFLOP/s columns differ
    by the two counts only; the mean of the logged rates (a mean of 1/t) read several percent above it with jittery
    iterations, as if megatron counted more FLOPs. None when the lines log no rate (on every line or none,
    ``_value_problem``)."""
    logged = [line.tflops_per_gpu for line in lines]
    if None in logged:
        return None
    flops = [rate * line.elapsed_ms / 1000.0 for rate, line in zip(logged, lines, strict=True)]
    return window.summarise(per_iteration(window, lines, flops)) / step_time_s


def failed_row(log: str, model: str, status: str, args: dict, gpus_per_node: int, key: str = "") -> ScalingRow:
    """The row of a run without numbers (failed, out of memory, truncated, refused): its ``status``, its benchmark
    settings and the configuration its arguments block gives (:func:`configuration`), so that the failed rows of a
    sweep say which layout failed; the measured columns stay empty, and, not being ok, the row is in no series,
    average or baseline. A log without an arguments block gives neither."""
    settings = benchmark_settings(args) if args else ()
    return ScalingRow(log, model, status, **configuration(args, gpus_per_node), model_key=key, settings=settings)


def configuration(args: dict, gpus_per_node: int) -> dict:
    """The :class:`ScalingRow` configuration fields (``nodes``, ``gpus``, ``seq_length``, ``global_batch_size``,
    ``micro_batch_size``) that ``args`` gives as positive integers, the nodes as its ``world_size`` over
    ``gpus_per_node`` where that is a whole number (a part of a node is the wrong ``--gpus-per-node`` or a cut value,
    :func:`implausible_numbers`). A field the block lacks, gives garbled (a zero, a value another rank's output cut
    into), or contradicts (a world size other than the product of the parallel sizes, :func:`world_size_problem`; a
    sequence length other than ``encoder_seq_length``, :func:`sequence_length_problem`) is left out rather than shown
    as a size the run never had."""
    given = {"gpus": args.get("world_size"), "seq_length": args.get("seq_length"),
             "global_batch_size": args.get("global_batch_size"), "micro_batch_size": args.get("micro_batch_size")}
    fields = {name: value for name, value in given.items() if is_positive_int(value)}
    if "seq_length" in fields and sequence_length_problem(fields["seq_length"], args):
        del fields["seq_length"]
    if "gpus" in fields and world_size_problem(fields["gpus"], args):
        del fields["gpus"]
    if "gpus" in fields and fields["gpus"] % gpus_per_node == 0:
        fields["nodes"] = fields["gpus"] / gpus_per_node
    return fields


PARALLEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "data_parallel_size")
"""The arguments whose product is the world size, as megatron-core 0.19.2's ``validate_args`` sets them and
``_print_args`` prints them (``gtp_weight_remat_size``, a further factor where megatron prints it, is 1 by
default)."""


def implausible_numbers(row: ScalingRow, args: dict, gpus_per_node: int, peak_tflops: float) -> str:
    """Why the numbers of ``row`` (an ok row summarised from ``args``) cannot be right, or '': the world size is not
    the product of the parallel sizes (a check skipped where the block lacks one of :data:`PARALLEL_SIZES`, as an
    older megatron's may), the sequence length is not the block's ``encoder_seq_length``
    (:func:`sequence_length_problem`), the world size is no whole number of nodes, or the MFU is above 100 %. Another
    rank's output cutting a value in two (``world_size ... 3`` / ``[rank21]: ...`` / ``2``) gave a row of 0.75 nodes
    at ten times the real throughput, marked ok."""
    if problem := garbled_integer_problem(args, (*PARALLEL_SIZES, "gtp_weight_remat_size", "encoder_seq_length")):
        return problem
    if problem := world_size_problem(row.gpus, args):
        return problem
    if problem := sequence_length_problem(row.seq_length, args):
        return problem
    if row.gpus % gpus_per_node:
        return (f"implausible arguments: world_size {row.gpus} is no whole number of {gpus_per_node}-GPU nodes; give "
                "--gpus-per-node with the GPUs of one of the run's nodes")
    if row.mfu is not None and row.mfu > 1:
        return (f"implausible numbers: MFU {100 * row.mfu:.1f}% is above 100% ({row.tflops_per_gpu:.1f} TFLOP/s/GPU "
                f"against a peak of {peak_text(peak_tflops)}; world_size {row.gpus}, seq_length {row.seq_length}, global batch "
                f"size {row.global_batch_size}, step time {row.step_time_s:.3f} s): a value cut by another rank's "
                "output, or give the GPU's peak with --gpu or --peak-tflops")
    return ""


def world_size_problem(world_size: int, args: dict) -> str:
    """Why ``world_size`` (the run's, from ``args``) cannot be the run's, or '': it is not the product of the block's
    :data:`PARALLEL_SIZES` (and ``gtp_weight_remat_size`` where it is not 1). Skipped where the block lacks one of
    them, as an older megatron's may, or gives one that is no positive integer (a garbled value, refused as such)."""
    sizes = {name: args.get(name) for name in PARALLEL_SIZES}
    remat = args.get("gtp_weight_remat_size") or 1
    if remat != 1:
        sizes["gtp_weight_remat_size"] = remat
    if not all(is_positive_int(value) for value in sizes.values()) or world_size == math.prod(sizes.values()):
        return ""
    factors = " x ".join(f"{name} {value}" for name, value in sizes.items())
    return (f"implausible arguments: world_size {world_size} is not {factors} = {math.prod(sizes.values())} "
            "(a value cut by another rank's output?)")


def sequence_length_problem(seq_length: int, args: dict) -> str:
    """Why ``seq_length`` (the row's, from ``args``) cannot be the run's, or '': megatron-core 0.19.2's
    ``validate_args`` sets ``encoder_seq_length`` to ``seq_length`` before printing the block, so the two differ only
    where another rank's output cut one of them (``seq_length ... 40`` / ``[rank21]: ...`` / ``96``), which gave an
    ok row 100 times too slow that could become the efficiency baseline. Skipped where the block lacks
    ``encoder_seq_length`` (an older megatron, or its line lost)."""
    encoder = args.get("encoder_seq_length")
    if encoder is None or encoder == seq_length:
        return ""
    return (f"implausible arguments: seq_length {seq_length} is not encoder_seq_length {encoder}, which megatron sets "
            "equal to it (a value cut by another rank's output?)")


BENCHMARK_SETTINGS = (
    "moe_router_force_load_balancing", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "attention_backend",
    "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules", "fp8", "fp8_recipe")
"""Megatron arguments that change the throughput without being a scaling dimension (routing forced or real, the
token dispatcher and its backend, the attention backend, recompute, FP8): runs that differ in one are no scaling
series, so the efficiency does not rate one setting against another."""


SETTINGS_READ_ONLY_WITH = {
    "moe_flex_dispatcher_backend": ("moe_token_dispatcher_type", ("flex",)),
    "recompute_method": ("recompute_granularity", ("full",)),
    "recompute_num_layers": ("recompute_granularity", ("full",)),
    "recompute_modules": ("recompute_granularity", ("selective",)),
    "fp8_recipe": ("fp8", ("e4m3", "hybrid")),
}
"""The :data:`BENCHMARK_SETTINGS` that megatron-core 0.19.2 reads only where another argument has one of the given
values, as (that argument, its values): the dispatcher backend only with the flex dispatcher, the recompute method
and number of layers only with full recompute, the recompute modules only with selective recompute, the FP8 recipe
only with an FP8 format. Megatron prints their defaults whether or not it reads them (``fp8_recipe delayed`` in a
BF16 run, ``moe_flex_dispatcher_backend deepep`` with the alltoall dispatcher)."""


SETTINGS_FILLED_IN = {"recompute_modules": "['core_attn']"}
"""The :data:`BENCHMARK_SETTINGS` that megatron-core 0.19.2 fills in where a run that reads them gives none, as the
value it uses, printed as megatron prints a given one: ``TransformerConfig`` recomputes ``core_attn`` under selective
recompute without ``--recompute-modules``, while the arguments block still prints ``recompute_modules None``."""


def benchmark_settings(args: dict) -> tuple[tuple[str, str], ...]:
    """The run's :data:`BENCHMARK_SETTINGS` as (name, printed value) pairs, ``"None"`` where the block lacks one or
    the run does not read it (:func:`setting_applies`), as megatron prints a setting that is not set: BF16 runs agree
    on their FP8 recipe, and no note compares the recipe an FP8 run used with the default a BF16 run never read. A
    setting megatron fills in where the run gives none (:data:`SETTINGS_FILLED_IN`) is the value it uses: a selective
    recompute of the default modules and one naming them are one series."""
    return tuple((name, _setting_value(name, args)) for name in BENCHMARK_SETTINGS)


SETTING_ENUMS = {"attention_backend": "AttnBackend"}
"""The :data:`BENCHMARK_SETTINGS` whose value megatron-core 0.19.2 holds as an enum member, as the enum's class name:
``--attention-backend flash`` is ``AttnBackend.flash`` in its namespace, and ``_print_args`` prints that repr. The
table gives the member's name (``flash``), as the flag takes it."""


def _setting_value(name: str, args: dict) -> str:
    """Benchmark setting ``name`` of a run of ``args`` as :func:`benchmark_settings` gives it: an enum member by its
    name (:data:`SETTING_ENUMS`)."""
    if not setting_applies(name, args):
        return "None"
    value = args.get(name)
    text = SETTINGS_FILLED_IN[name] if value is None and name in SETTINGS_FILLED_IN else str(value)
    return text.removeprefix(f"{SETTING_ENUMS[name]}.") if name in SETTING_ENUMS else text


def setting_applies(name: str, args: dict) -> bool:
    """Whether a run of ``args`` reads benchmark setting ``name``: always, unless :data:`SETTINGS_READ_ONLY_WITH`
    names the argument it depends on and the run gives that argument none of the values it is read with."""
    if name not in SETTINGS_READ_ONLY_WITH:
        return True
    governing, values = SETTINGS_READ_ONLY_WITH[name]
    return args.get(governing) in values


def sorted_rows(rows: Sequence[ScalingRow]) -> list[ScalingRow]:
    """``rows`` in the printed order: rows with numbers by model (name, then :attr:`ScalingRow.model_key`), sequence
    length, global batch size and nodes (a scaling series reads top to bottom whatever order the shell listed the
    logs in; runs of one sequence length together, as a table mixing 4k, 8k and 24k runs needs), then rows without
    numbers in their given order."""
    def key(row: ScalingRow) -> tuple:
        return (0, row.model, row.model_key, row.seq_length, row.global_batch_size, row.nodes) if row.ok else (1,)

    return sorted(rows, key=key)


def comparable(row: ScalingRow, baseline: ScalingRow) -> bool:
    """``row`` has numbers, trains the baseline's model (name and :attr:`ScalingRow.model_key`: two models that match
    no card can both be ``unregistered model``) at its sequence length and with its benchmark settings
    (:attr:`ScalingRow.settings`: forced or real routing, dispatcher, attention backend, recompute, FP8), and has
    either the baseline's global batch size (strong scaling) or its global batch size per GPU (weak scaling): only
    then is its tokens/s/GPU relative to the baseline's a scaling efficiency (another model, length, setting or batch
    is another workload, e.g. a strong-scaling run at GBS 4096 against the GBS-256 start of a weak-scaling series in
    the same table, or real routing against forced balancing): the two share a series (:func:`series_of`)."""
    return row.ok and not set(series_of(row)).isdisjoint(series_of(baseline))


def series_of(row: ScalingRow) -> tuple[tuple, tuple]:
    """The strong- and the weak-scaling series ``row`` (an ok row) belongs to, as ``(kind, model, model key, sequence
    length, settings, batch)``: its model, sequence length and benchmark settings with its global batch size, or with
    its global batch size per GPU."""
    workload = (row.model, row.model_key, row.seq_length, row.settings)
    return ("strong", *workload, row.global_batch_size), ("weak", *workload, Fraction(row.global_batch_size, row.gpus))


def varying_settings(rows: Sequence[ScalingRow]) -> list[str]:
    """The benchmark settings (:attr:`ScalingRow.settings`) whose value differs between ok ``rows`` of one model and
    sequence length, in :data:`BENCHMARK_SETTINGS` order: what splits their series apart, for the table's notes and
    the plot's labels (a setting that differs only between two models' rows splits nothing the model does not). A
    setting counts only in the rows that read it (:func:`setting_applies`): an FP8 run's recipe against a BF16 run's
    is the difference in ``fp8``, named once."""
    values: dict[tuple, set[str]] = {}
    for row in rows:
        if row.ok:
            for name, value in row.settings:
                if setting_applies(name, dict(row.settings)):
                    values.setdefault((name, row.model, row.model_key, row.seq_length), set()).add(value)
    varying = {name for (name, *_), seen in values.items() if len(seen) > 1}
    return [name for name in BENCHMARK_SETTINGS if name in varying]


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
            found = f"the ok rows run on {_node_counts(ok)}" if ok else "the table has no ok row"
            raise TableError(f"--baseline-nodes {baseline_nodes:g}: no ok row on that many nodes ({found})")
        baseline = _largest_series_first(matching, ok)
    else:
        baseline = _default_baseline(ok)
    if baseline is None:
        return list(rows), None
    rated = [dataclasses.replace(row, efficiency=row.tokens_per_s_per_gpu / baseline.tokens_per_s_per_gpu,
                                 scaling=_scaling_kind(row, baseline))
             if comparable(row, baseline) else row for row in rows]
    return rated, next(new for old, new in zip(rows, rated, strict=True) if old is baseline)


def _node_counts(rows: Sequence[ScalingRow]) -> str:
    """The node counts of ``rows`` (ok rows, one at least), ascending: ``1 node``, ``4, 8 nodes``."""
    counts = sorted({row.nodes for row in rows})
    return node_count(counts[0]) if len(counts) == 1 else f"{', '.join(f'{n:g}' for n in counts)} nodes"


def _scaling_kind(row: ScalingRow, baseline: ScalingRow) -> str:
    """Which series of ``baseline`` rates ``row`` (a :func:`comparable` one), as :attr:`ScalingRow.scaling`: its
    strong series where ``row`` belongs to it (:func:`series_of`; also a rerun on as many GPUs, which shares both),
    else its weak one."""
    if row is baseline:
        return "baseline"
    return "strong" if series_of(row)[0] == series_of(baseline)[0] else "weak"


def unrated_rows_note(rows: Sequence[ScalingRow], baseline: ScalingRow | None) -> str | None:
    """One ``note:`` line naming the ok rows of the printed ``rows`` that got no efficiency, being no workload of the
    baseline's (:func:`comparable`), and the benchmark settings that set them apart from it, or None when every ok
    row is rated: an empty cell must not read as a lost number."""
    if baseline is None:
        return None
    unrated = [number for number, row in enumerate(rows, 1) if row.ok and row.efficiency is None]
    if not unrated:
        return None
    number = next(number for number, row in enumerate(rows, 1) if row is baseline)
    listed_rows = f"row {unrated[0]} has" if len(unrated) == 1 else f"rows {', '.join(map(str, unrated))} have"
    split = _settings_split(rows, unrated, baseline)
    reasons = ("another model, sequence length, global batch size (per GPU) or benchmark setting" if split else
               "another model, sequence length or global batch size (per GPU)")
    return (f"note: {listed_rows} no efficiency: {reasons} than the baseline, row {number} ({baseline.model}, seq "
            f"{baseline.seq_length}, GBS {baseline.global_batch_size} on {node_count(baseline.nodes)}){split}; "
            "--baseline-row N rates another series")


def _settings_split(rows: Sequence[ScalingRow], unrated: Sequence[int], baseline: ScalingRow) -> str:
    """'' or ``; the setting(s) that split(s) the series ...: NAME VALUE in the baseline, OTHER in rows N, M``: each
    benchmark setting in which rows ``unrated`` (1-based numbers of ``rows``) differ from ``baseline``, with the rows
    of each other value; a setting only where both rows read it (:func:`setting_applies`: a BF16 run has no FP8 recipe
    to compare, its ``fp8`` differs)."""
    theirs = dict(baseline.settings)
    others: dict[str, dict[str, list[int]]] = {}
    for number in unrated:
        mine = dict(rows[number - 1].settings)
        for name, value in mine.items():
            if value != theirs.get(name) and setting_applies(name, mine) and setting_applies(name, theirs):
                others.setdefault(name, {}).setdefault(value, []).append(number)
    if not others:
        return ""
    parts = [f"{name} {theirs.get(name)} in the baseline, " + ", ".join(
        f"{value} in {'row' if len(numbers) == 1 else 'rows'} {', '.join(map(str, numbers))}"
        for value, numbers in values.items()) for name, values in others.items()]
    which = "the setting that splits" if len(parts) == 1 else "the settings that split"
    return f"; {which} the series (no scaling dimension): {'; '.join(parts)}"


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
            f"{'s' if len(ties) == 1 else ''} its workload on {node_count(baseline.nodes)} and would give other "
            "efficiencies: --baseline-row N picks one (rows numbered as printed)")
