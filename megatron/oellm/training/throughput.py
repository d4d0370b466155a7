"""Per-interval throughput from our FLOP accounting: one ``[oellm]`` line after each Megatron log line.

Megatron's own line stays as it is; after it, every log interval prints::

    [oellm] iteration 20 | tokens/s/GPU: 123456.7 | TFLOP/s/GPU: 234.50 | MFU: 23.71%

Tokens are the global batch's (``global batch x seq_length``, padding included, as Megatron counts), FLOPs are
:func:`megatron.oellm.flops.training_flops_per_token` of the card, MFU is against the GPU's nominal dense peak
(:mod:`megatron.oellm.peaks`; ``n/a`` on a GPU without a known peak). The time is Megatron's ``interval-time``
timer, the same one its ``elapsed time per iteration`` comes from, read just before Megatron reads and resets it.

Before the first of these lines, the same rank prints once what they are computed on (:class:`ThroughputBasis`)::

    [oellm] throughput basis: 19.1374 GFLOP/token (oellm FLOP count, training, seq 4096) | MFU vs h100-sxm dense
    bf16 989 TFLOP/s on 'NVIDIA H100 80GB HBM3', FP8 runs too

(one line in the log). ``oellm table`` reads it (:func:`parse_basis`), so that its MFU is against the same peak as
the log's.

megatron 0.19.2 has no hook for extra per-interval metrics, so :func:`install_throughput_logging` wraps
``megatron.training.training.training_log`` (exactly 0.19.2, as the runtime patches, and guarded by its signature);
``patches/training-log-hook.md`` describes the upstream change that would replace the wrapper.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from megatron.oellm.patches.release import applies_to, megatron_core_release, without_patch_layers
from megatron.oellm.peaks import GPU_PEAKS, Precision, mfu, peak_text, valid_peak

LINE_PREFIX = "[oellm]"
"""Start of every throughput line."""

DEVICE_PEAKS = (("GH200", "gh200"), ("H200 NVL", "h200-nvl"), ("H200", "h200-sxm"), ("H100 PCIe", "h100-pcie"),
                ("H100 NVL", "h100-nvl"), ("H100", "h100-sxm"), ("A100", "a100"))
"""Substring of ``torch.cuda.get_device_name()`` -> :data:`megatron.oellm.peaks.GPU_PEAKS` name (first match: the
PCIe and NVL cards before the SXM modules, whose names are the bare ``NVIDIA H100 80GB HBM3`` / ``NVIDIA H200``; every
A100, e.g. ``NVIDIA A100-SXM4-80GB`` or Leonardo's ``NVIDIA A100-SXM-64GB``, shares one peak)."""

BASIS_PREFIX = f"{LINE_PREFIX} throughput basis: "
"""Start of the line that states what the throughput lines are computed on (:class:`ThroughputBasis`)."""

_BASIS_PEAK = re.compile(re.escape(BASIS_PREFIX) + r".* \| MFU (?:vs (?:(?P<gpu>[a-z0-9-]+) dense bf16 )?"
                         r"(?P<peak>[-+0-9.eE]+) TFLOP/s|(?P<none>n/a))")
"""The MFU part of a basis line: the peak and, unless it was given by hand, its :data:`GPU_PEAKS` name; or ``n/a``."""

HOOKED_FUNCTION = "training_log"
"""The function of ``megatron.training.training`` that :func:`install_throughput_logging` wraps."""


@dataclass(frozen=True)
class Throughput:
    """Throughput of one log interval, per GPU."""

    iteration: int
    """Last iteration of the interval."""
    tokens_per_s_per_gpu: float
    """Training tokens per second per GPU."""
    tflops_per_gpu: float
    """Model TFLOP/s per GPU (our FLOP accounting)."""
    mfu: float | None
    """Model-FLOP utilisation (fraction), None without a known peak."""

    def format(self) -> str:
        """The ``[oellm]`` log line."""
        mfu = "n/a" if self.mfu is None else f"{100 * self.mfu:.2f}%"
        return (f"{LINE_PREFIX} iteration {self.iteration} | tokens/s/GPU: {self.tokens_per_s_per_gpu:.1f} | "
                f"TFLOP/s/GPU: {self.tflops_per_gpu:.2f} | MFU: {mfu}")


@dataclass(frozen=True)
class ThroughputBasis:
    """What the ``[oellm]`` throughput lines are computed on, printed once before the first of them, so that a log
    says which FLOP count and which peak its MFU has (the peak is picked from the CUDA device name: the same run on an
    A100 or an H100 PCIe card has another) and ``oellm table`` can rate the run against the same peak."""

    flops_per_token: float
    """Training FLOPs per token, :func:`megatron.oellm.flops.training_flops_per_token`."""
    seq_length: int
    """The sequence length the FLOP count is for."""
    peak_tflops: float | None
    """The MFU's peak TFLOP/s per GPU, None when none is known (the lines print ``MFU: n/a``)."""
    peak_given: bool = False
    """The peak came from ``--oellm-peak-tflops``, not from the device name."""

    def format(self, device: str) -> str:
        """The basis line on the GPU CUDA calls ``device``."""
        flops = (f"{self.flops_per_token / 1e9:.4f} GFLOP/token (oellm FLOP count, training, seq "
                 f"{self.seq_length})")
        return f"{BASIS_PREFIX}{flops} | {self._mfu_basis(device)}"

    def _mfu_basis(self, device: str) -> str:
        """The line's MFU part, worded as ``oellm bench``'s header: the peak's GPU name and precision, the hand-given
        peak, or that no MFU is computed."""
        if self.peak_tflops is None:
            return f"MFU n/a: no dense bf16 peak known for {device!r}; --oellm-peak-tflops TFLOPS gives it"
        if self.peak_given:
            return f"MFU vs {peak_text(self.peak_tflops)} TFLOP/s (--oellm-peak-tflops) on {device!r}"
        gpu = device_peak_name(device)
        return f"MFU vs {gpu} dense bf16 {peak_text(self.peak_tflops)} TFLOP/s on {device!r}, FP8 runs too"


@dataclass(frozen=True)
class LoggedPeak:
    """The MFU peak a log's basis line names (:func:`parse_basis`)."""

    tflops: float | None
    """TFLOP/s per GPU; None where the line says no MFU is computed."""
    gpu: str | None
    """Its :data:`megatron.oellm.peaks.GPU_PEAKS` name; None for a peak given by ``--oellm-peak-tflops`` (or none)."""


def parse_basis(line: str) -> LoggedPeak | None:
    """The peak of a :class:`ThroughputBasis` line; None for any other line, or one whose peak is no positive number
    or whose GPU name is not in :data:`GPU_PEAKS` (a line another rank's output cut into)."""
    match = _BASIS_PEAK.search(line)
    if match is None:
        return None
    if match["none"]:
        return LoggedPeak(None, None)
    try:
        tflops = float(match["peak"])
    except ValueError:
        return None
    if not valid_peak(tflops) or (match["gpu"] is not None and match["gpu"] not in GPU_PEAKS):
        return None
    return LoggedPeak(tflops, match["gpu"])


def measure(iteration: int, tokens: int, elapsed_s: float, num_gpus: int, flops_per_token: float,
            peak_tflops: float | None) -> Throughput:
    """Throughput of ``tokens`` trained by ``num_gpus`` GPUs in ``elapsed_s`` seconds.

    Raises ValueError on a time that is no positive, finite number (NaN passes a ``<= 0`` test and would print
    ``nan``, which no reader of the line parses) or on a non-finite FLOP rate.
    """
    if not 0 < elapsed_s < math.inf or num_gpus <= 0:
        raise ValueError(f"elapsed time and GPU count must be positive, got {elapsed_s} s on {num_gpus} GPUs")
    tokens_per_s_per_gpu = tokens / elapsed_s / num_gpus
    tflops = tokens_per_s_per_gpu * flops_per_token / 1e12
    if not math.isfinite(tflops):
        raise ValueError(f"TFLOP/s per GPU is not finite ({tflops}) at {flops_per_token} FLOPs per token")
    return Throughput(iteration, tokens_per_s_per_gpu, tflops, None if peak_tflops is None else mfu(tflops, peak_tflops))


def device_peak_name(device_name: str) -> str | None:
    """The :data:`megatron.oellm.peaks.GPU_PEAKS` name of the GPU CUDA calls ``device_name``, None when unknown."""
    for marker, name in DEVICE_PEAKS:
        if marker in device_name:
            return name
    return None


def device_peak_tflops(device_name: str, precision: Precision = "bf16") -> float | None:
    """Nominal dense peak of the GPU named ``device_name`` (as CUDA names it), None when it is not known."""
    name = device_peak_name(device_name)
    return None if name is None else GPU_PEAKS[name].tflops(precision)


def iteration_tokens(args: argparse.Namespace, num_microbatches: int) -> int:
    """Tokens of one iteration's global batch, as megatron's ``training_log`` counts its batch: micro-batch x
    data-parallel size x GTP weight-rematerialisation size (``--tensor-parallel-num-weight-shards``: megatron's
    ``data_parallel_size`` leaves that axis out, yet each of its ranks draws its own micro-batches) x micro-batches,
    times the sequence length."""
    return (args.micro_batch_size * args.data_parallel_size * args.gtp_weight_remat_size * num_microbatches
            * args.seq_length)


def check_hook_point(function: Callable[..., object]) -> inspect.Signature:
    """The signature of megatron's ``training_log``; raise if it lacks what the wrapper reads (another release)."""
    signature = inspect.signature(function)
    missing = {"iteration", "is_first_iteration"} - set(signature.parameters)
    if missing:
        raise RuntimeError(f"megatron.training.training.{HOOKED_FUNCTION} has no parameter(s) {sorted(missing)}: "
                           "this megatron release is not the one the [oellm] throughput line was written for "
                           "(see patches/training-log-hook.md)")
    return signature


@dataclass
class IntervalCount:
    """Tokens of the iterations megatron's ``interval-time`` timer has covered since it last reset it.

    ``tokens`` is None when an iteration of the interval could not be counted (the hook failed on it): that
    interval's line is then left out rather than printed too low.
    """

    tokens: int | None = 0

    def add(self, tokens: int, first: bool) -> None:
        """Count one iteration. The first iteration of a ``train`` call starts afresh: megatron starts the timer just
        before it, so tokens left from an earlier, unlogged ``train`` in this process are no part of its interval."""
        if first:
            self.tokens = tokens
        elif self.tokens is not None:
            self.tokens += tokens

    def take(self, first: bool) -> int | None:
        """The interval's tokens at a log iteration; the count restarts except at the first iteration, where megatron
        leaves its timer running into the next interval."""
        tokens = self.tokens
        if not first:
            self.tokens = 0
        return tokens


@dataclass(frozen=True)
class PendingLine:
    """What a log iteration's line needs, read before megatron's ``training_log`` resets its timer."""

    iteration: int
    tokens: int | None
    elapsed_s: float


class HookWarnings:
    """Reports each kind of failure of the hook once, as a :class:`RuntimeWarning`: the hook must never raise into
    megatron's training loop (a bad reading costs one ``[oellm]`` line, not the run), nor flood the log."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def report(self, error: Exception) -> None:
        """Warn about ``error`` unless one of its type was already reported."""
        kind = type(error).__name__
        if kind not in self.seen:
            self.seen.add(kind)
            warnings.warn(f"[oellm] throughput line left out: {error!r}", RuntimeWarning, stacklevel=3)


def install_throughput_logging(basis: ThroughputBasis) -> bool:
    """Wrap megatron's ``training_log`` so that each log interval also prints the ``[oellm]`` line computed on
    ``basis`` (its FLOPs per token and peak), and its first call the basis line, on the rank that prints the others,
    before megatron's first iteration line; True if installed.

    Exactly megatron-core 0.19.2, as the runtime patches (another release keeps megatron's ``training_log``, with a
    warning). Installing again replaces the wrapper, with the new FLOPs and peak, instead of stacking one. The
    wrapper counts the tokens of every iteration and, at a logging iteration, reads megatron's ``interval-time`` timer
    (without resetting it) before megatron's own ``training_log`` reads and resets it. Megatron's ``training_log`` is
    called exactly once per call, whatever happens in the wrapper's own part, which never raises
    (:class:`HookWarnings`).
    """
    from megatron.core.num_microbatches_calculator import get_num_microbatches
    from megatron.training import get_args, get_timers, training
    from megatron.training.utils import print_rank_last

    if not applies_to(megatron_core_release(), "training-log-hook"):
        return False
    original = without_patch_layers(training.training_log)
    signature = check_hook_point(original)
    count = IntervalCount()
    failures = HookWarnings()
    unprinted = [basis]

    def print_basis() -> None:
        """Print the basis line once, at the first call (the GPU is set up by then, so CUDA names it); a failure
        is not retried at every later call."""
        import torch

        if unprinted:
            line = unprinted.pop()
            print_rank_last(line.format(torch.cuda.get_device_name()))

    def before(args: tuple, kwargs: dict) -> PendingLine | None:
        """Count this iteration; at a log iteration, the pending line (None at any other)."""
        bound = signature.bind(*args, **kwargs)
        iteration = bound.arguments["iteration"]
        first = bool(bound.arguments.get("is_first_iteration", False))
        megatron_args = get_args()
        count.add(iteration_tokens(megatron_args, get_num_microbatches()), first)
        if not (first or iteration % megatron_args.log_interval == 0):
            return None
        tokens = count.take(first)
        elapsed = get_timers()("interval-time").elapsed(barrier=False, reset=False)  # megatron's own log barriers next
        return PendingLine(iteration, tokens, elapsed)

    def after(pending: PendingLine) -> None:
        """Print the pending line (left out when an iteration of its interval was not counted)."""
        if pending.tokens is None:
            return
        line = measure(pending.iteration, pending.tokens, pending.elapsed_s, get_args().world_size,
                       basis.flops_per_token, basis.peak_tflops)
        print_rank_last(line.format())

    @functools.wraps(original)
    def training_log(*args: Any, **kwargs: Any) -> Any:
        try:
            print_basis()
        except Exception as error:  # noqa: BLE001 - the training run must go on
            failures.report(error)
        try:
            pending = before(args, kwargs)
        except Exception as error:  # noqa: BLE001 - the training run must go on
            count.tokens, pending = None, None
            failures.report(error)
        result = original(*args, **kwargs)
        if pending is not None:
            try:
                after(pending)
            except Exception as error:  # noqa: BLE001 - the training run must go on
                failures.report(error)
        return result

    training_log.oellm_patched = True
    training.training_log = training_log
    return True
