"""Scaling tables from Megatron logs, in the format of the benchmark reports (markdown, CSV, PNG).

One row per log: nodes, GPUs, global and micro batch size, the median (or mean) step time over an iteration window
(default 3-10, as the reports), tokens/s/GPU, TFLOP/s/GPU from our FLOP accounting
(:func:`megatron.oellm.flops.training_flops_per_token` of the run's card) and Megatron's logged value, MFU and the
efficiency against a baseline row. A log holding several starts of the program (a requeued job appending to its
log) is read with the arguments and the failure of the run that printed the window's lines. A run that ran out of
memory, timed out in NCCL, was stopped by megatron's check of a NaN or Inf result, crashed or was cancelled, or
that stops before the window ends (``truncated``, or ``exited`` with the flag when megatron reports an early exit it was asked for: ``--exit-interval``,
``--exit-duration-in-mins``, ``--exit-signal-handler``) gives a row that says so and carries no numbers; so does a window whose lines do not average exactly its own iterations (a line missing or cut, a line
that also covers warm-up before the window, a restart inside it) or that has skipped steps, a time that is not a
positive number, a change of the global batch size, or arguments the numbers need that are not positive integers.
Our TFLOP/s and the MFU are n/a for a model that cannot be identified from its arguments, or whose vocabulary the log
gives neither as ``vocab_size`` nor in megatron's ``padded vocab`` line (Megatron's logged TFLOP/s is still shown).
Rows with numbers come first, sorted by model, global batch size and nodes (:func:`sorted_rows`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import io
import math
import os
import signal
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from megatron.oellm.cards import PUBLISHED_CARDS, CardError, ModelCard, get_card
from megatron.oellm.flops import megatron_padded_vocab, training_flops_per_token
from megatron.oellm.peaks import GPU_PEAKS, mfu
from megatron.oellm.run_log import DeliberateExit, IterationLine, Run, RunLog

DEFAULT_PEAK_TFLOPS = GPU_PEAKS["h100-sxm"].bf16_tflops
"""The reports' MFU denominator: H100 / GH200 dense BF16 peak (989 TFLOP/s)."""

FlopsPerToken = Callable[[ModelCard, int, int], float]
"""(card, seq_length, padded vocabulary) -> training FLOPs per token."""

_IDENTITY_EXCLUDED = {"name", "sources", "hf_architecture", "vocab_size", "seq_length", "max_position_embeddings",
                      "num_layers", "moe_aux_loss_coeff", "moe_router_load_balancing_type"}
"""Card fields that do not identify a model (training choices, vocabulary, depth of a proxy)."""


class TableError(ValueError):
    """Bad table options (window, baseline, plot); the message names the fix."""


STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {"median": statistics.median, "mean": statistics.mean}
"""How a window's per-iteration values are summarised (the reports: medians; the real-routing run: a mean)."""


@dataclass(frozen=True)
class Window:
    """Iterations ``first..last`` (inclusive) and how their values are summarised."""

    first: int = 3
    last: int = 10
    statistic: str = "median"
    """A key of :data:`STATISTICS`."""

    @classmethod
    def parse(cls, text: str, statistic: str = "median") -> Window:
        """``"3-10"`` -> Window(3, 10)."""
        try:
            first, last = (int(part) for part in text.split("-"))
        except ValueError:
            raise TableError(f"--window {text!r}: give FIRST-LAST iterations, e.g. 3-10") from None
        if not 1 <= first <= last:
            raise TableError(f"--window {text!r}: need 1 <= FIRST <= LAST")
        if statistic not in STATISTICS:
            raise TableError(f"statistic {statistic!r}: use one of {', '.join(STATISTICS)}")
        return cls(first, last, statistic)

    def summarise(self, values: Sequence[float]) -> float:
        """The window's statistic of ``values``."""
        return STATISTICS[self.statistic](values)

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


@dataclass(frozen=True)
class ScalingRow:
    """One log summarised; the numbers are None when ``status`` is not ``ok``."""

    log: str
    model: str
    status: str
    nodes: float | None = None
    gpus: int | None = None
    global_batch_size: int | None = None
    micro_batch_size: int | None = None
    seq_length: int | None = None
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    """Our FLOP accounting (None when the model is unknown)."""
    tflops_per_gpu_logged: float | None = None
    """Megatron's own ``throughput per GPU`` (the window's median or mean)."""
    mfu: float | None = None
    """Fraction of the peak, from our TFLOP/s (None when the model is unknown)."""
    efficiency: float | None = None
    """tokens/s/GPU relative to the baseline row."""
    model_key: str = field(default="", repr=False)
    """What tells the row's model apart from another of the same :attr:`model` name (see :func:`model_key`); not
    printed, not a CSV column."""

    @property
    def ok(self) -> bool:
        """The row carries numbers."""
        return self.status == "ok"


def identify_model(args: dict) -> tuple[str, ModelCard | None]:
    """(display name, card) of a run: ``--oellm-model`` if logged, else the card rebuilt from Megatron's flags and
    named after the registry card it matches (a proxy if only the depth differs); ('unknown model', None) else."""
    vocab, name = args.get("vocab_size"), args.get("oellm_model")
    if name:
        if not isinstance(name, str):  # a garbled block can print a number or list
            return "unknown model", None
        try:
            card = get_card(name)
        except CardError:
            return "unknown model", None
        return card.name, card.with_vocab(vocab) if isinstance(vocab, int) else card
    from megatron.oellm.training.card_from_args import card_from_megatron_args

    try:
        card = card_from_megatron_args(argparse.Namespace(**args))
    except (ValueError, TypeError, AttributeError, KeyError):
        return "unknown model", None
    if not whole_sizes(card):
        return "unknown model", None
    return registry_name(card), card


def whole_sizes(card: ModelCard) -> bool:
    """Every size of ``card`` (a field that is an integer in the registry's cards) is a non-negative integer: a card
    rebuilt from a block whose value another rank's output cut into (``512[rank3]: W...``) carries that text, which
    the FLOP count cannot add."""
    return all(_non_negative_int(getattr(card, name)) for name in _size_fields())


def _non_negative_int(value: object) -> bool:
    """``value`` is an integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@functools.cache
def _size_fields() -> tuple[str, ...]:
    """The :class:`ModelCard` fields that hold an integer (not a bool) in every registry card; computed once."""
    return tuple(f.name for f in dataclasses.fields(ModelCard)
                 if all(_non_negative_int(getattr(card, f.name)) for card in PUBLISHED_CARDS.values()))


ARCHITECTURE_ARGUMENTS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_layer_freq", "moe_shared_expert_intermediate_size",
    "hybrid_layer_pattern", "experimental_attention_variant", "linear_attention_freq", "multi_latent_attention",
    "mtp_num_layers", "swiglu", "vocab_size")
"""Megatron arguments that tell apart two models no card describes (both ``unknown model``)."""


def model_key(args: dict, card: ModelCard | None) -> str:
    """What makes two rows the same model: the card's architecture (its depth included), else the architecture
    arguments of the block. The display names do not: every model that matches no registry card is ``unregistered
    model``, every one no card describes ``unknown model``, and rows of two such models are no scaling series."""
    if card is not None:
        return repr(sorted((f.name, getattr(card, f.name)) for f in dataclasses.fields(card)
                           if f.name not in _IDENTITY_EXCLUDED or f.name == "num_layers"))
    return repr([(name, args.get(name)) for name in ARCHITECTURE_ARGUMENTS])


def registry_name(card: ModelCard) -> str:
    """The registry name ``card`` matches (``<model>`` or ``<model>-proxy-<N>L``), else ``unregistered model``."""
    def identity(c: ModelCard) -> dict:
        return {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name not in _IDENTITY_EXCLUDED}

    for published in PUBLISHED_CARDS.values():
        if identity(published) == identity(card):
            if published.num_layers == card.num_layers:
                return published.name
            return f"{published.name}-proxy-{card.num_layers}L"
    return "unregistered model"


def corrected_flops_per_token(card: ModelCard, seq_length: int, padded_vocab: int) -> float:
    """Training FLOPs per token of our accounting (:func:`megatron.oellm.flops.training_flops_per_token`)."""
    return training_flops_per_token(card, seq_length, padded_vocab=padded_vocab).total


def window_run(log: RunLog, window: Window) -> Run:
    """The run the window's row is about: the latest start of the program that printed a line in the window, else
    (no line in it) the log's last run."""
    lines = window_lines(log, window)
    return log.runs[max(line.run for line in lines)] if lines else log.runs[-1]


def window_status(log: RunLog, window: Window) -> str:
    """'ok' when the window's run (:func:`window_run`) shows no failure and the log's lines average exactly the
    window's iterations (one run, none missing, none reaching before the window) with no skipped step, bad number or
    batch-size change; else what went wrong."""
    run = window_run(log, window)
    if run.failure:
        return f"{run.failure} at iteration {run.last_iteration}" if run.last_iteration else run.failure
    if not run.args:
        return "no arguments block (not a Megatron log, or truncated before it)"
    if not run.args_complete:
        return "truncated inside the arguments block"
    total = run.train_iters
    if total is not None and total < window.first:
        return f"run of {total} iterations ends before the window {window}"
    if total is not None and total < window.last:
        return (f"run of {total} iterations ends inside the window {window}: its numbers would cover only "
                f"{window.first}-{total}; give --window {window.first}-{total} for them")
    if run.last_iteration < window.last and not run.finished:
        return stopped_status(run)
    lines = window_lines(log, window)
    if not lines:
        return no_line_status(run, window)
    return (_coverage_problem(log, window, lines) or _value_problem(window, lines) or _batch_problem(log, window, lines)
            or "ok")


def no_line_status(run: Run, window: Window) -> str:
    """The status of a window the log has no iteration line in: a run resumed from a checkpoint after the window
    printed none there (its lines begin at :attr:`Run.start`), else the log interval passes over the window (named
    with the interval the arguments block gives, so that the user can pick a window ending on a logged iteration)."""
    if run.start is not None and run.start > window.last:
        after_warm_up = _window_after_warm_up(run)
        advice = f"; e.g. --window {after_warm_up}, which leaves out the warm-up after the start" if after_warm_up else ""
        return (f"no iteration line in the window {window}: this start of the program begins at iteration "
                f"{run.start} (resumed from a checkpoint?); give a window within {run.start}-{run.last_iteration}"
                f"{advice}")
    interval = run.args.get("log_interval")
    if _positive_int(interval):
        return (f"no iteration line in the window {window}: the log interval is {interval}, so megatron printed "
                f"iterations {run.start or 1} and multiples of {interval} only; end the window on one of them")
    return f"no iteration line in the window {window} (log interval larger than the window?)"


def _window_after_warm_up(run: Run) -> Window | None:
    """A window of ``run`` whose lines leave out the first two iterations after its start, as the default 3-10 does
    for a run from iteration 1: a resumed run's first steps also pay for compilation and allocation. With log
    interval 1 it spans eight iterations; with a longer interval, one whole interval after the line that averages
    the start. None when the run has no such window or its log interval cannot be read."""
    interval = run.args.get("log_interval")
    if run.start is None or not _positive_int(interval):
        return None
    if interval == 1:
        first = run.start + 2
        last = min(run.last_iteration, first + 7)
    else:
        first = (run.start // interval + 1) * interval + 1
        last = first - 1 + interval
    return Window(first, last) if first <= last <= run.last_iteration else None


def stopped_status(run: Run) -> str:
    """The status of a run that stopped before the window's end: ``exited ...`` naming the flag when megatron reports
    an early exit it was asked for (:attr:`Run.deliberate_exit`; the job did not die), else ``truncated ...``."""
    total = run.train_iters if run.train_iters is not None else "?"
    exit_ = run.deliberate_exit
    if exit_ is None:
        return f"truncated at iteration {run.last_iteration}/{total}"
    cause = exit_cause(run.args, exit_)
    if exit_.iteration is None:
        return f"exited after iteration {run.last_iteration}/{total} ({cause})"
    if exit_.iteration != run.last_iteration:
        cause += f"; last line at iteration {run.last_iteration}"
    return f"exited at iteration {exit_.iteration}/{total} ({cause})"


def exit_cause(args: dict, exit_: DeliberateExit) -> str:
    """The flag (with its value from the arguments block) that made megatron exit early as ``exit_`` reports."""
    if exit_.kind == "duration":
        return _flag_with_value("--exit-duration-in-mins", args.get("exit_duration_in_mins"))
    if exit_.kind == "signal":
        return f"--exit-signal-handler: {_signal_name(args.get('exit_signal'))} received"
    if exit_.kind == "termination":
        return "SIGINT or SIGTERM received, --exit-signal-handler-for-training"
    interval, phases = args.get("exit_interval"), args.get("phase_transition_iterations")
    if isinstance(phases, list) and exit_.iteration in phases and not (
            _positive_int(interval) and exit_.iteration % interval == 0):
        return "--phase-transition-iterations"
    return _flag_with_value("--exit-interval", interval)


def _positive_int(value: object) -> bool:
    """``value`` is a positive integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _flag_with_value(flag: str, value: object) -> str:
    """``--flag N`` when the arguments block gives a positive integer N, else the flag alone."""
    return f"{flag} {value}" if _positive_int(value) else flag


def _signal_name(value: object) -> str:
    """The name of the ``exit_signal`` argument as printed (``15`` from Python >= 3.11, ``Signals.SIGTERM`` before);
    megatron's default SIGTERM when it cannot be read."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signal.Signals(value).name
        except ValueError:
            return "SIGTERM"
    if isinstance(value, str) and value.startswith("Signals."):
        return value.removeprefix("Signals.")
    return "SIGTERM"


def window_lines(log: RunLog, window: Window) -> list[IterationLine]:
    """The log's iteration lines printed at iterations ``window.first..window.last`` that the window's numbers are
    read from, in order: all but a run's first line when the run's next line, also in the window, averages that
    first iteration again (:func:`interval_start`), as at ``--window 1-10`` with log interval 10 (lines at 1 and
    10: the line of 10 alone covers the window, once)."""
    lines = [line for i, line in sorted(log.iterations.items()) if window.first <= i <= window.last]
    return [line for k, line in enumerate(lines)
            if not _averaged_again(log, line, lines[k + 1] if k + 1 < len(lines) else None)]


def _averaged_again(log: RunLog, line: IterationLine, following: IterationLine | None) -> bool:
    """``line`` is its run's first line and ``following``, the run's next line, averages from that iteration on."""
    run = log.runs[line.run]
    interval = run.args.get("log_interval")
    return (following is not None and following.run == line.run and line.iteration == run.start
            and _positive_int(interval) and interval_start(following.iteration, run.start, interval) == run.start)


def interval_start(iteration: int, run_start: int, log_interval: int) -> int:
    """The first iteration that Megatron's line at ``iteration`` averages over, in a run whose first line is at
    ``run_start``: megatron prints that first iteration without resetting its interval timer, so its next line (at
    the next multiple of ``log_interval``) covers it too; every later line covers the ``log_interval`` before it."""
    if iteration <= (run_start // log_interval + 1) * log_interval:
        return run_start
    return iteration - log_interval + 1


def _coverage_problem(log: RunLog, window: Window, lines: Sequence[IterationLine]) -> str:
    """'' when ``lines`` come from one run and average every iteration of the window exactly once and nothing before
    it; else what is wrong."""
    runs = {line.run for line in lines}
    if len(runs) > 1:
        return f"the window {window} spans a restart: its lines come from {len(runs)} starts of the program"
    run = log.runs[lines[0].run]
    interval = run.args.get("log_interval")
    if not isinstance(interval, int) or interval < 1:
        return "arguments block lacks log_interval"
    run_start = run.start
    expected = window.first
    for line in lines:
        start = interval_start(line.iteration, run_start, interval)
        if start < window.first:
            return (f"the line of iteration {line.iteration} averages iterations {start}-{line.iteration}, which "
                    f"begin before the window {window} (log interval {interval}); start the window at {start}, or "
                    f"after {line.iteration}")
        if start < expected:
            return (f"the line of iteration {line.iteration} averages iterations {start}-{line.iteration}, which "
                    f"overlap the line of iteration {expected - 1} (megatron does not reset its timer there)")
        if start > expected:
            gap = f"iteration {expected}" if start - 1 == expected else f"iterations {expected}-{start - 1}"
            cause = f"this start of the program begins at {run_start}" if start == run_start else "missing or cut"
            return f"no line for {gap} of the window {window} ({cause})"
        expected = line.iteration + 1
    following = (lines[-1].iteration // interval + 1) * interval
    if following <= window.last:
        return f"no line for iteration {following} of the window {window} (missing or cut)"
    if lines[-1].iteration < window.last and run.finished and lines[-1].iteration == run.last_iteration:
        return (f"iterations {lines[-1].iteration + 1}-{window.last} of the window {window} are in no log line (the run "
                f"ended between lines, log interval {interval}); end the window at {lines[-1].iteration}")
    if lines[-1].iteration < window.last:
        return (f"the window {window} ends between log lines: the last line in it averages up to iteration "
                f"{lines[-1].iteration}, the next one reaches {following} (log interval {interval}); end the window "
                "on a logged iteration")
    return ""


def _value_problem(window: Window, lines: Sequence[IterationLine]) -> str:
    """'' when no line of the window counts a skipped step, every time is positive and finite, and Megatron's TFLOP/s
    is finite on every line or absent from all; else what is wrong."""
    for line in lines:
        if line.skipped_iterations or line.nan_iterations:
            return (f"skipped steps in the window {window}: the line of iteration {line.iteration} counts "
                    f"{line.skipped_iterations} skipped, {line.nan_iterations} NaN")
        if not 0 < line.elapsed_ms < math.inf:
            return f"elapsed time per iteration {line.elapsed_ms} ms at iteration {line.iteration}"
        if line.tflops_per_gpu is not None and not math.isfinite(line.tflops_per_gpu):
            return f"Megatron TFLOP/s/GPU {line.tflops_per_gpu} at iteration {line.iteration}"
    if len({line.tflops_per_gpu is None for line in lines}) > 1:
        return f"Megatron TFLOP/s/GPU is missing from some lines of the window {window}"
    return ""


def _consumed_before(log: RunLog, run: int, first: int) -> int | None:
    """Samples consumed before iteration ``first`` by start ``run`` of the program, from that run's own lines: its
    line at ``first - 1``, else, when the run starts at ``first``, its first line less that line's batch (the first
    line covers its one iteration only); None when neither is in the log."""
    previous = log.iterations.get(first - 1)
    if previous is not None and previous.run == run and previous.consumed_samples is not None:
        return previous.consumed_samples
    start = log.iterations.get(first)
    if (first == log.runs[run].start and start is not None and start.run == run
            and start.consumed_samples is not None and start.global_batch_size is not None):
        return start.consumed_samples - start.global_batch_size
    return None


def _batch_problem(log: RunLog, window: Window, lines: Sequence[IterationLine]) -> str:
    """'' when the global batch size is the same on every line and each line's interval consumed exactly that many
    samples per iteration; else what is wrong.

    A line prints the batch size of its last iteration only, so a batch that changed inside a line's interval (a
    ``--step-batch-size-schedule`` step between two lines of ``log_interval`` > 1) leaves the lines' batch sizes equal
    while the averaged time covers smaller batches. Megatron's running ``consumed samples`` shows it. An interval
    whose start no line shows is accepted unless the run has a batch-size schedule. ``lines`` must have passed
    :func:`_coverage_problem` (one run, a valid ``log_interval``)."""
    batches = sorted({line.global_batch_size for line in lines if line.global_batch_size is not None})
    if len(batches) > 1:
        return (f"global batch size changes in the window {window} ({', '.join(map(str, batches))}): batch-size "
                "ramp-up?")
    run = log.runs[lines[0].run]
    for line in lines:
        first = interval_start(line.iteration, run.start, run.args["log_interval"])
        if first == line.iteration or line.consumed_samples is None or line.global_batch_size is None:
            continue
        before = _consumed_before(log, line.run, first)
        if before is None:
            if run.args.get("step_batch_size_schedule") is not None:
                return (f"the line of iteration {line.iteration} averages iterations {first}-{line.iteration} of a "
                        f"batch-size schedule, and no line shows the samples consumed before iteration {first}: "
                        "its batch size may have changed inside")
            continue
        iterations = line.iteration - first + 1
        if line.consumed_samples - before != iterations * line.global_batch_size:
            return (f"global batch size changes inside the line of iteration {line.iteration}: iterations "
                    f"{first}-{line.iteration} consumed {line.consumed_samples - before} samples, not "
                    f"{iterations} x {line.global_batch_size} (batch-size schedule?)")
    return ""


VOCAB_ARGUMENTS = ("vocab_size", "make_vocab_size_divisible_by", "tensor_model_parallel_size")
"""The arguments our FLOP count reads to pad the vocabulary as Megatron does."""


def garbled_integer_problem(args: dict, names: Sequence[str]) -> str:
    """What is wrong with the first of ``names`` that is given (not None) but is no positive integer, e.g. a value
    that another rank's output cut into; '' when all are fine."""
    for name in names:
        value = args.get(name)
        if value is not None and not _positive_int(value):
            return f"arguments block has a {name} that is no positive integer: {str(value)[:40]!r}"
    return ""


def run_arguments(run: Run) -> dict:
    """The run's arguments, ``vocab_size`` taken from megatron's ``padded vocab`` line when the block has none: a run
    whose tokenizer sets the vocabulary (no ``--vocab-size``) prints the block before building it, and without the
    vocabulary neither can its card be rebuilt nor its FLOPs counted."""
    if run.args.get("vocab_size") is None and run.vocabulary is not None:
        return {**run.args, "vocab_size": run.vocabulary[0]}
    return run.args


def logged_padded_vocab(args: dict) -> int | None:
    """The output layer's vocabulary as Megatron pads it (to ``make_vocab_size_divisible_by`` x tensor-parallel
    size; None when the arguments give no vocabulary size). The values must have passed
    :func:`garbled_integer_problem`."""
    if args.get("vocab_size") is None:
        return None
    return megatron_padded_vocab(args["vocab_size"], args.get("tensor_model_parallel_size") or 1,
                                 args.get("make_vocab_size_divisible_by"))


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


def per_iteration(window: Window, lines: Sequence[IterationLine], values: Sequence[float]) -> list[float]:
    """``values`` (one per line of ``lines``) repeated once for each iteration of the window its line averages, so
    that the median or mean is one over the window's iterations, not its lines: a run's first averaged line can cover
    more or fewer iterations than the log interval (e.g. 1-2 at log interval 1). ``lines`` must have passed
    :func:`_coverage_problem` (they tile the window)."""
    ends = [window.first - 1, *(line.iteration for line in lines)]
    return [value for value, before, end in zip(values, ends[:-1], ends[1:], strict=True)
            for _ in range(end - before)]


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
    strong-scaling run at GBS 4096 against the GBS-256 start of a weak-scaling series in the same table)."""
    if not (row.ok and (row.model, row.model_key) == (baseline.model, baseline.model_key)
            and row.seq_length == baseline.seq_length):
        return False
    return (row.global_batch_size == baseline.global_batch_size
            or row.global_batch_size * baseline.gpus == baseline.global_batch_size * row.gpus)


def with_efficiency(rows: Sequence[ScalingRow], baseline_row: int | None = None,
                    baseline_nodes: float | None = None) -> tuple[list[ScalingRow], ScalingRow | None]:
    """``rows`` with tokens/s/GPU relative to the baseline (the :func:`comparable` rows; the others get none), and the
    baseline (the returned list's row): ``baseline_row`` (1-based), else the first ok row on ``baseline_nodes``
    nodes, else the ok row on the fewest nodes (None if no row is ok)."""
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
        baseline = matching[0]
    else:
        baseline = min(ok, key=lambda row: row.nodes) if ok else None
    if baseline is None:
        return list(rows), None
    rated = [dataclasses.replace(row, efficiency=row.tokens_per_s_per_gpu / baseline.tokens_per_s_per_gpu)
             if comparable(row, baseline) else row for row in rows]
    return rated, next(new for old, new in zip(rows, rated, strict=True) if old is baseline)


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
                    peak_tflops: float = DEFAULT_PEAK_TFLOPS) -> str:
    """The table in the reports' markdown format, with a footnote on how the numbers were computed."""
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
              f"reports'). MFU = TFLOP/s/GPU / {peak_tflops:g} (n/a with our TFLOP/s). Efficiency: tokens/s/GPU "
              "relative to the baseline row, for the rows of its model and sequence length and of its global batch size "
              "(strong scaling) or global batch size per GPU (weak scaling)."]
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


def scaling_series(rows: Sequence[ScalingRow]) -> list[tuple[str, list[ScalingRow]]]:
    """The ok rows as the scaling series the table's efficiencies compare (:func:`comparable`), each a legend label
    and its rows by nodes: a strong-scaling series (one model, sequence length and global batch size) or a
    weak-scaling one (one model, sequence length and global batch size per GPU) over two or more node counts, so that
    a plot draws the report's two tables as two lines, not one zigzag. A run can close both (the report's 64-node
    run at GBS 4096); a run in neither is a series of its own global batch size."""
    groups: dict[tuple, list[ScalingRow]] = {}
    for row in (row for row in rows if row.ok):
        workload = (row.model, row.model_key, row.seq_length)
        groups.setdefault(("strong", *workload, row.global_batch_size), []).append(row)
        groups.setdefault(("weak", *workload, Fraction(row.global_batch_size, row.gpus)), []).append(row)
    series, in_series = [], set()
    for (kind, model, _, seq_length, batch), members in groups.items():
        if len({row.nodes for row in members}) >= 2:
            size = f"GBS {batch}" if kind == "strong" else f"GBS {float(batch):g} per GPU"
            series.append((f"{model}, seq {seq_length}, {size} ({kind} scaling)", members))
            in_series.update(id(row) for row in members)
    for (kind, model, _, seq_length, batch), members in groups.items():
        if kind == "strong" and not in_series.intersection(id(row) for row in members):
            series.append((f"{model}, seq {seq_length}, GBS {batch}", members))
    return [(label, sorted(members, key=lambda row: row.nodes)) for label, members in series]


PANEL_INCHES = 5.0
"""Height of the plot's two panels (throughput and efficiency), titles and axis labels included."""
LEGEND_ROW_INCHES = 0.21
"""Height of one row of the plot's legend (two series side by side) at its small font."""
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Markers of the plot's series: the first ten series take matplotlib's ten colours with the first marker, the next
ten the second marker, and so on, so 80 series are told apart before a pair repeats."""


def check_plot_path(path: str) -> None:
    """Raise :class:`TableError` unless matplotlib writes the image at ``path`` as named: the extension names a format
    it writes (it picks the format from the extension, and without one it writes ``path + ".png"``, replacing a file
    the user never named; an unknown one, e.g. a log's ``.out``, ends in its ValueError) and ``path`` is no folder.
    Its folder must exist and be writable, checked before any log is read, as the other checks are. Needs matplotlib
    (the ``plot`` extra)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise TableError("--plot needs matplotlib: pip install 'megatron-oellm[plot]' (or pip install "
                         "matplotlib)") from None
    if os.path.isdir(path):
        raise TableError(f"--plot {path!r} is a folder; name the image file, e.g. {os.path.join(path, 'scaling.png')}")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise TableError(f"--plot {path!r}: folder {folder!r} does not exist; create it or name an image in an "
                         "existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TableError(f"--plot {path!r}: folder {folder!r} is not writable; name an image in a folder you can "
                         "write to")
    extension = os.path.splitext(path)[1][1:].lower()
    if extension not in FigureCanvasBase.get_supported_filetypes():
        found = (f"matplotlib writes no {extension!r} image" if extension else
                 f"without an extension matplotlib would write {path + '.png'!r} instead")
        raise TableError(f"--plot {path!r}: {found}; name the image file, e.g. scaling.png (or .pdf, .svg)")


def plot(rows: Sequence[ScalingRow], path: str, title: str = "") -> None:
    """PNG of tokens/s/GPU and efficiency vs nodes (ok rows only), one line per :func:`scaling_series` with a
    legend; the efficiency panel draws the series whose rows all have one (the baseline's strong and weak series:
    another series' row relative to that baseline is no point of its own curve). The figure grows by a legend row per
    two series, so a sweep's many series keep their panels, and each of the first 80 series has its own colour and
    marker pair (:data:`SERIES_MARKERS`; the 81st takes the first's again). Needs matplotlib (the ``plot`` extra)."""
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = scaling_series(rows)
    if not series:
        raise TableError("--plot: no row has numbers to plot")
    nodes = sorted({row.nodes for _, members in series for row in members})
    legend_inches = LEGEND_ROW_INCHES * (math.ceil(len(series) / 2) + 1)
    figure, (throughput, efficiency) = plt.subplots(1, 2, figsize=(12, PANEL_INCHES + legend_inches))
    top_tokens, top_percent = 0.0, 110.0  # room above a baseline's 100% or any higher row
    for index, (label, members) in enumerate(series):
        style = {"marker": SERIES_MARKERS[index // 10 % len(SERIES_MARKERS)], "color": f"C{index % 10}", "label": label}
        tokens = [row.tokens_per_s_per_gpu for row in members]
        throughput.plot([row.nodes for row in members], tokens, **style)
        top_tokens = max([top_tokens, *tokens])
        if all(row.efficiency is not None for row in members):
            percents = [100 * row.efficiency for row in members]
            efficiency.plot([row.nodes for row in members], percents, **style)
            top_percent = max([top_percent] + [1.05 * percent for percent in percents])
    throughput.set(xlabel="nodes", ylabel="tokens/s/GPU", xscale="log", ylim=(0, 1.1 * top_tokens), title="throughput")
    efficiency.set(xlabel="nodes", ylabel="efficiency (%)", xscale="log", ylim=(0, top_percent), title="efficiency")
    for axis in (throughput, efficiency):
        axis.set_xticks(nodes, [f"{n:g}" for n in nodes])
        axis.minorticks_off()
        axis.grid(alpha=0.3)
    figure.legend(*throughput.get_legend_handles_labels(), loc="lower center", ncol=min(len(series), 2),
                  fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout(rect=(0, legend_inches / (PANEL_INCHES + legend_inches), 1, 1))
    try:
        save_replacing(figure, path)
    finally:
        plt.close(figure)


def save_replacing(figure: Any, path: str) -> None:
    """Save ``figure`` to ``path`` through a temporary file beside it, renamed over ``path`` only once complete: a
    full disk, a lost quota or a killed job mid-write left a truncated image under the name, which passes for a
    plot, with the earlier good one gone. The format is ``path``'s extension (the temporary name has another)."""
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.partial-{os.getpid()}")  # created under the umask, as path would be
    try:
        figure.savefig(temporary, dpi=120, format=os.path.splitext(path)[1][1:].lower())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
