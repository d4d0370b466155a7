"""Timing and profiling one side's training step on the GPU."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from megatron.oellm.bench.measure import StepTimes
from megatron.oellm.commands import int_at_least


def time_steps(step: Callable[[], torch.Tensor], warmup: int, steps: int) -> StepTimes:
    """Run ``warmup`` untimed steps, then ``steps`` steps each bracketed by CUDA events; one sync at the end.

    Peak memory statistics are reset first, so the peak is this run's (warm-up included). The loss of the first
    warm-up step is read after the final synchronisation, so no step waits on the host.
    """
    if warmup < 1 or steps < 1:
        raise ValueError(f"need warmup >= 1 and steps >= 1, got warmup={warmup}, steps={steps}")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    first_loss = step()
    for _ in range(warmup - 1):
        step()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return StepTimes(step_ms=tuple(start.elapsed_time(end) for start, end in events),
                     peak_memory_bytes=torch.cuda.max_memory_allocated(), loss=float(first_loss))


def _card_name(text: str) -> str:
    """An argparse type: the name of a known card (``oellm models``), so a misspelt ``--card`` is a usage error that
    lists the known cards rather than a traceback."""
    from megatron.oellm.cards import CardError, get_card

    try:
        get_card(text)
    except CardError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _card_with_layers(text: str) -> str:
    """:func:`_card_name`, of a card whose family has a spec builder: a tool that builds the card's layers would stop
    on the GPU for one without (the CKDA hybrid's) with a ``KeyError``."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.models import SPEC_MODULES

    family = get_card(_card_name(text)).family
    if family not in SPEC_MODULES:
        raise argparse.ArgumentTypeError(f"{text}: model family {family!r} has no spec builder yet, so this tool "
                                         f"cannot build its layers; give a card of {', '.join(sorted(SPEC_MODULES))}")
    return text


def add_kernel_timing_options(parser: argparse.ArgumentParser) -> None:
    """The options every kernel benchmark in ``tools/`` takes: ``--tokens`` (per micro-batch), ``--warmup``,
    ``--steps``."""
    parser.add_argument("--tokens", type=int_at_least(1), default=32768,
                        help="tokens per micro-batch (default 8 x 4096)")
    parser.add_argument("--warmup", type=int_at_least(0), default=5)
    parser.add_argument("--steps", type=int_at_least(1), default=20)


def kernel_tool_parser(doc: str, with_card: bool = False, builds_layers: bool = False) -> argparse.ArgumentParser:
    """The parser of a kernel benchmark in ``tools/``: its docstring's first paragraph as the description, the
    timing options (:func:`add_kernel_timing_options`) and, ``with_card``, ``--card`` (default Qwen3.5-35B-A3B; with
    ``builds_layers``, a card with a spec builder only)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if with_card:
        parser.add_argument("--card", type=_card_with_layers if builds_layers else _card_name,
                            default="qwen3.5-35b-a3b")
    add_kernel_timing_options(parser)
    return parser



def require_cuda(parser: argparse.ArgumentParser) -> None:
    """Stop a kernel benchmark in ``tools/`` with ``parser``'s one-line usage error when there is no CUDA device to
    time on (called after its argument checks): its first CUDA tensor would stop it with a traceback."""
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU to time on (torch.cuda.is_available() is False); run it on a GPU node")


def median_ms(step: Callable[[], object], warmup: int, steps: int) -> float:
    """Median milliseconds of ``step`` between two CUDA events over ``steps`` runs after ``warmup`` untimed ones;
    each run is synchronised before the next starts, so a run's time is its own (kernel benchmarks in ``tools/``)."""
    times = []
    for run in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        if run >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def profile_step(step: Callable[[], torch.Tensor], out_dir: Path, name: str, top: int = 40) -> list[dict]:
    """Profile one step (after one warm-up step) with ``torch.profiler`` and write the ``top`` operators by CUDA time
    twice: ``out_dir/<name>_top_cuda.txt`` per operator and ``<name>_top_cuda_by_shape.txt`` per operator and input
    shapes, so a copy or a concatenation can be traced to the tensor it moves. Returns the ``top`` GPU kernels as
    dicts (name, calls, CUDA ms, share of all kernel time in the step)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = {"": prof.key_averages(), "_by_shape": prof.key_averages(group_by_input_shape=True)}
    for suffix, averages in tables.items():
        (out_dir / f"{name}_top_cuda{suffix}.txt").write_text(
            averages.table(sort_by="self_device_time_total", row_limit=top, max_name_column_width=90,
                           max_shapes_column_width=160))
    kernels = [e for e in tables[""] if e.device_type == torch.autograd.DeviceType.CUDA]  # GPU kernels, not ops
    total = sum(e.self_device_time_total for e in kernels) or 1.0
    kernels.sort(key=lambda e: e.self_device_time_total, reverse=True)
    return [{"name": e.key, "calls": e.count, "cuda_ms": e.self_device_time_total / 1e3,
             "share": e.self_device_time_total / total} for e in kernels[:top]]
