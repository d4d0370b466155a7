"""Benchmark bookkeeping: step times -> tokens/s, TFLOP/s, MFU; the micro-batch sweep with OOM handling; tables.

Pure Python apart from recognising ``torch.OutOfMemoryError``, so every rule here is tested on the CPU. The GPU
work (building the two models, timing a step) lives in :mod:`megatron.oellm.bench.sides` and
:mod:`megatron.oellm.bench.timing`; they hand this module plain numbers.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

Status = Literal["ok", "oom", "failed", "skipped"]
"""``ok``: measured; ``oom``: this micro-batch ran out of memory; ``failed``: it raised another error (kept in
:attr:`Measurement.error`); ``skipped``: a smaller one already ran out of memory or failed."""


@dataclass(frozen=True)
class StepTimes:
    """What one timed run of a side at one micro-batch size returned."""

    step_ms: tuple[float, ...]
    """Wall time of each timed step in milliseconds (CUDA events), warm-up steps excluded."""
    peak_memory_bytes: int
    """``torch.cuda.max_memory_allocated`` over warm-up and timed steps (peak stats reset before)."""
    loss: float
    """Language-model loss of the first warm-up step (the weights never change: no optimizer step)."""


@dataclass(frozen=True)
class Measurement:
    """One side at one micro-batch size: the throughput figures, or why there are none."""

    side: str
    mbs: int
    status: Status
    tokens_per_step: int
    step_ms_median: float | None = None
    step_ms_min: float | None = None
    step_ms_max: float | None = None
    tokens_per_s: float | None = None
    tflops: float | None = None
    """Achieved model TFLOP/s (corrected FLOP count x tokens/s)."""
    mfu: float | None = None
    """``tflops`` over the GPU's nominal dense peak, a fraction; None also for a measured row on a GPU without a known
    peak (printed ``n/a``)."""
    peak_memory_gib: float | None = None
    loss: float | None = None
    error: str | None = None
    """Why a ``failed`` micro-batch failed (exception type and message); None otherwise."""


def throughput(side: str, mbs: int, seq_length: int, times: StepTimes, flops_per_token: float,
               peak_tflops: float | None) -> Measurement:
    """The :class:`Measurement` of a completed run: median step time -> tokens/s -> TFLOP/s -> MFU (None without a
    ``peak_tflops``: a GPU whose peak is not known).

    The median (not the mean) is used so that a stray slow step (allocator growth, a host hiccup) does not move
    the figure; min and max are kept to show the spread.
    """
    if not times.step_ms:
        raise ValueError("no timed steps: pass --steps >= 1")
    tokens = mbs * seq_length
    median_ms = statistics.median(times.step_ms)
    tokens_per_s = tokens / (median_ms / 1e3)
    tflops = tokens_per_s * flops_per_token / 1e12
    return Measurement(
        side=side, mbs=mbs, status="ok", tokens_per_step=tokens, step_ms_median=median_ms,
        step_ms_min=min(times.step_ms), step_ms_max=max(times.step_ms), tokens_per_s=tokens_per_s,
        tflops=tflops, mfu=None if peak_tflops is None else tflops / peak_tflops,
        peak_memory_gib=times.peak_memory_bytes / 2**30, loss=times.loss)


def sweep(side: str, mbs_values: Sequence[int], seq_length: int, run: Callable[[int], StepTimes],
          flops_per_token: float, peak_tflops: float | None, free: Callable[[], None] = lambda: None,
          record_failures: bool = False) -> list[Measurement]:
    """Run ``run(mbs)`` for each micro-batch size in increasing order until one runs out of GPU memory.

    The first ``torch.OutOfMemoryError`` is recorded as ``oom`` and every larger size as ``skipped`` (it would
    need more memory still). Any other exception propagates, unless ``record_failures``: then it is recorded as
    ``failed`` with its message and the larger sizes ``skipped`` in the same way, so a caller benchmarking several
    sides keeps this side's earlier figures and goes on with the next side. After an OOM or a recorded failure the
    exception and its frames are dropped, ``free()`` is called (the side drops its gradients) and the CUDA cache is
    emptied, so the next side starts from a clean allocator.
    """
    results: list[Measurement] = []
    stopped = False
    for mbs in sorted(set(mbs_values)):
        tokens = mbs * seq_length
        if stopped:
            results.append(Measurement(side, mbs, "skipped", tokens))
            continue
        status, times, error = _attempt(run, mbs, record_failures)
        if times is not None:
            results.append(throughput(side, mbs, seq_length, times, flops_per_token, peak_tflops))
            continue
        stopped = True
        release_memory(free)  # the exception, and the failed step's frames with it, are gone by now
        results.append(Measurement(side, mbs, status, tokens, error=error))
    return results


def _attempt(run: Callable[[int], StepTimes], mbs: int,
             record_failures: bool) -> tuple[Status, StepTimes | None, str | None]:
    """``run(mbs)`` as (status, its times or None, the error message of a recorded failure or None). Returning
    from the handler drops the exception, so its traceback no longer holds the failed step's tensors."""
    try:
        return "ok", run(mbs), None
    except torch.OutOfMemoryError:
        return "oom", None, None
    except Exception as error:
        if not record_failures:
            raise
        return "failed", None, describe(error)


def describe(error: BaseException) -> str:
    """``Type: message`` of an exception, as a report gives a failure."""
    return f"{type(error).__name__}: {error}"


def failed_sweep(side: str, mbs_values: Sequence[int], seq_length: int, error: str) -> list[Measurement]:
    """The rows of a side that failed before its first micro-batch (e.g. its weights could not be moved to the
    GPU): the smallest size ``failed`` with ``error``, the others ``skipped``, as :func:`sweep` records it."""
    sizes = sorted(set(mbs_values))
    return [Measurement(side, mbs, "failed" if i == 0 else "skipped", mbs * seq_length,
                        error=error if i == 0 else None) for i, mbs in enumerate(sizes)]


def release_memory(free: Callable[[], None]) -> None:
    """Let the side drop what it holds, collect garbage (reference cycles of the failed step) and empty the cache."""
    free()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def best(results: Sequence[Measurement]) -> Measurement | None:
    """The measured result with the highest tokens/s, or None when nothing was measured."""
    measured = [r for r in results if r.status == "ok"]
    return max(measured, key=lambda r: r.tokens_per_s) if measured else None


def speedup(ours: Measurement | None, theirs: Measurement | None) -> float | None:
    """tokens/s of ``ours`` over ``theirs`` (each side at its own best micro-batch); None if either is missing."""
    if ours is None or theirs is None:
        return None
    return ours.tokens_per_s / theirs.tokens_per_s


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _mfu_cell(measurement: Measurement) -> str:
    """The MFU column of a row: a percentage, ``n/a`` for a measured row without a peak, ``-`` for one not measured."""
    if measurement.mfu is not None:
        return format(100 * measurement.mfu, ".1f")
    return "n/a" if measurement.status == "ok" else "-"


def format_table(results: Sequence[Measurement]) -> str:
    """A fixed-width table (one row per side and micro-batch size) for logs and docs/benchmarks.md."""
    header = (f"{'side':<6} {'MBS':>4} {'status':>7} {'step ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU %':>6} "
              f"{'peak GiB':>9} {'loss':>8}")
    rows = [header, "-" * len(header)]
    for r in results:
        rows.append(f"{r.side:<6} {r.mbs:>4} {r.status:>7} {_cell(r.step_ms_median, '.1f'):>9} "
                    f"{_cell(r.tokens_per_s, ',.0f'):>10} {_cell(r.tflops, '.1f'):>8} {_mfu_cell(r):>6} "
                    f"{_cell(r.peak_memory_gib, '.1f'):>9} {_cell(r.loss, '.4f'):>8}")
    return "\n".join(rows)


RATIOS = (("ours", "hf"), ("te", "hf"), ("ours", "te"))
"""Side pairs whose tokens/s ratio a report gives when both were benchmarked: each of our backends against
transformers, and the torch-native backend against Transformer Engine's."""


def summary(results: Sequence[Measurement], sides: Sequence[str]) -> dict[str, Any]:
    """Each side's best micro-batch result and, for each pair of :data:`RATIOS` benchmarked, the tokens/s ratio of
    the two at their own best micro-batch sizes (``speedup_<a>_over_<b>``; None when either measured nothing)."""
    best_by_side = {side: best([r for r in results if r.side == side]) for side in sides}
    out: dict[str, Any] = {f"best_{side}": None if m is None else asdict(m) for side, m in best_by_side.items()}
    for numerator, denominator in RATIOS:
        if numerator in best_by_side and denominator in best_by_side:
            out[f"speedup_{numerator}_over_{denominator}"] = speedup(best_by_side[numerator],
                                                                    best_by_side[denominator])
    return out
