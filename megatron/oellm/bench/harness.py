"""``oellm bench`` end to end: build the sides, sweep micro-batch sizes per side, optionally profile, report."""

from __future__ import annotations

import dataclasses
import sys
import traceback
from dataclasses import InitVar, asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from megatron.oellm.bench import BACKEND_OF_SIDE, DEFAULT_SIDES, SIDES
from megatron.oellm.bench.measure import (
    Measurement,
    StepTimes,
    best,
    describe,
    failed_sweep,
    release_memory,
    summary,
    sweep,
)
from megatron.oellm.bench.sides import (
    BEST_OURS_SETTINGS,
    Side,
    build_sides,
    check_card_overrides,
    make_batch,
    ours_transformer_config,
)
from megatron.oellm.bench.timing import profile_step, time_steps
from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.peaks import peak_tflops, valid_peak
from megatron.oellm.training.throughput import device_peak_name


@dataclass(frozen=True)
class BenchConfig:
    """What to benchmark and how (the ``oellm bench`` arguments)."""

    model: str = "qwen3.5-35b-a3b-proxy-4L"
    """Card name (a ``qwen3.5-35b-a3b`` flavour: transformers has no model for the other families' hybrids)."""
    seq_length: int = 4096
    """Tokens per sequence, 2 to the card's ``max_position_embeddings`` (the longest training accepts)."""
    mbs: tuple[int, ...] = (1, 2, 4, 8)
    """Micro-batch sizes, swept upwards per side until one runs out of memory."""
    warmup: int = 3
    """Untimed steps before timing (kernel autotuning, torch.compile of megatron's fused pieces, allocator)."""
    steps: int = 10
    """Timed steps; the median step time is reported."""
    sides: tuple[str, ...] = DEFAULT_SIDES
    """Which of :data:`megatron.oellm.bench.SIDES` to benchmark, in this order."""
    ours_overrides: dict[str, Any] = field(default_factory=lambda: dict(BEST_OURS_SETTINGS))
    """TransformerConfig fields for our sides (``ours``, ``te``) on top of the spec builder's."""
    gpu: str | None = None
    """Name in :data:`megatron.oellm.peaks.GPU_PEAKS` whose dense bf16 peak MFU is quoted against; None: the
    benchmarked GPU's own, from its CUDA name (:func:`with_device_gpu`), or no MFU where that GPU has no known peak
    and :attr:`peak_tflops` gives none."""
    peak_tflops: float | None = None
    """TFLOP/s per GPU MFU is quoted against, given by hand (a GPU missing from the peak table); excludes
    :attr:`gpu`."""
    profile_dir: Path | None = None
    """Where to write each side's top CUDA kernels of one step at its best micro-batch size (None: no profile)."""
    check_sides: InitVar[bool] = True
    """False: leave :meth:`check_our_sides` (megatron-core's and Transformer Engine's imports, seconds) to the caller,
    which can then refuse cheaply first (``oellm bench`` on a node without a GPU); the other checks are made all the
    same."""

    def __post_init__(self, check_sides: bool) -> None:
        card = get_card(self.model)
        if card.family != "qwen3_5":
            raise ValueError(f"oellm bench compares against transformers' Qwen3_5MoeForCausalLM; {card.name} is a "
                             f"{card.family} card: use a qwen3.5-35b-a3b flavour")
        unknown = [s for s in self.sides if s not in SIDES]
        if unknown or not self.sides:
            raise ValueError(f"unknown sides {unknown}; choose from {', '.join(SIDES)}")
        if self.seq_length < 2:
            raise ValueError(f"seq_length must be >= 2 (one next-token target at least), got {self.seq_length}")
        if self.seq_length > card.max_position_embeddings:
            raise ValueError(f"--seq-length {self.seq_length} exceeds {card.name}'s max_position_embeddings "
                             f"{card.max_position_embeddings}, which training refuses; benchmark at most that")
        if not self.mbs or min(self.mbs) < 1:
            raise ValueError(f"micro-batch sizes must be positive, got {self.mbs}")
        if self.warmup < 1 or self.steps < 1:
            raise ValueError(f"need warmup >= 1 and steps >= 1, got {self.warmup} and {self.steps}")
        if self.gpu is not None and self.peak_tflops is not None:
            raise ValueError("give the MFU peak as --gpu or --peak-tflops, not both")
        if self.gpu is not None:
            peak_tflops(self.gpu)  # an unknown name raises here, before any model is built
        if self.peak_tflops is not None and not valid_peak(self.peak_tflops):
            raise ValueError(f"--peak-tflops must be a positive TFLOP/s per GPU, got {self.peak_tflops}")
        if check_sides:
            self.check_our_sides()

    def mfu_peak(self) -> float | None:
        """The TFLOP/s MFU is quoted against: :attr:`peak_tflops`, else the dense bf16 peak of :attr:`gpu`, else None
        (no MFU)."""
        if self.peak_tflops is not None:
            return self.peak_tflops
        return None if self.gpu is None else peak_tflops(self.gpu)

    def check_our_sides(self) -> None:
        """Build our sides' TransformerConfig on the CPU now and check each side's backend can run it, so that an
        override megatron-core refuses (a misspelt field, a value its checks reject), a setting one backend lacks
        the kernels for, or a ``te`` side without Transformer Engine is a ValueError here, not a traceback once
        transformers' model is on the GPU (the models are otherwise first built after it). Nothing to check without
        our sides."""
        ours = [side for side in self.sides if side in BACKEND_OF_SIDE]
        if ours:
            self._check_our_sides(get_card(self.model), ours)

    def _check_our_sides(self, card: ModelCard, ours: list[str]) -> None:
        """:meth:`check_our_sides` of the sides ``ours`` of ``card``."""
        from megatron.oellm.backends import check_config_support
        from megatron.oellm.backends.selection import transformer_engine_import_error

        te_error = transformer_engine_import_error() if "te" in ours else None
        if te_error is not None:
            raise ValueError(f"the te side needs Transformer Engine, which does not import here ({te_error}): "
                             "drop te from --sides")
        check_card_overrides(card, self.ours_overrides)
        try:
            config = ours_transformer_config(card, self.ours_overrides)
        except (TypeError, ValueError, AssertionError) as error:
            raise ValueError(f"our sides' TransformerConfig overrides (--ours-config) are refused: {error}") from error
        for side in ours:
            try:
                check_config_support(BACKEND_OF_SIDE[side], config)
            except ValueError as error:
                raise ValueError(f"the {side} side cannot run with these settings (--ours-config, or the "
                                 f"benchmark's best settings unless --plain-ours): {error}") from error


@dataclass
class BenchReport:
    """Everything ``oellm bench`` prints: setup, per side and MBS figures, the best of each side and profiles."""

    config: dict[str, Any]
    device: str
    flops_per_token: float
    peak_tflops: float | None
    """What MFU is quoted against; None on a GPU without a known peak, where every MFU is None too."""
    settings: dict[str, dict[str, Any]]
    results: list[Measurement]
    summary: dict[str, Any]
    profiles: dict[str, list[dict]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    """Failures outside the measurement rows, by side (``profile: Type: message``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = asdict(self)
        out["results"] = [asdict(r) for r in self.results]
        return out

    def failures(self) -> list[str]:
        """One line per failure of the run: each ``failed`` row (side, MBS, error), then :attr:`errors`."""
        rows = [f"{r.side} MBS {r.mbs}: {r.error}" for r in self.results if r.status == "failed"]
        return rows + [f"{side} {error}" for side, error in self.errors.items()]

    def failed_sides(self) -> list[str]:
        """The sides with a failure (:meth:`failures`), each once, in the order benchmarked."""
        failed = [r.side for r in self.results if r.status == "failed"] + list(self.errors)
        return list(dict.fromkeys(failed))


def with_device_gpu(config: BenchConfig, device_name: str) -> BenchConfig:
    """``config`` with :attr:`BenchConfig.gpu` set to the :data:`megatron.oellm.peaks.GPU_PEAKS` name of the GPU CUDA
    calls ``device_name`` (the training entry's table, so the bench and training runs quote MFU against the same
    peak) where neither ``--gpu`` nor ``--peak-tflops`` chose the peak; a GPU without a known peak leaves it None,
    and the bench measures all the same, with MFU n/a."""
    if config.gpu is not None or config.peak_tflops is not None:
        return config
    return dataclasses.replace(config, gpu=device_peak_name(device_name), check_sides=False)  # only the peak changed


def _print_failure(side: str, stage: str) -> None:
    """The traceback of the exception being handled on stderr, headed by the side and stage that raised it: the
    report keeps only its last line."""
    print(f"oellm bench: the {side} side failed ({stage}); its other figures are kept:", file=sys.stderr)
    traceback.print_exc(file=sys.stderr)


def _run_side(side: Side, config: BenchConfig, vocab_size: int, flops_per_token: float,
              peak: float | None) -> list[Measurement]:
    """One side's micro-batch sweep, the same batches as the other side (same seed per MBS); an error other than
    running out of memory is recorded as that MBS ``failed`` (its traceback printed), not raised."""

    def run(mbs: int) -> StepTimes:
        batch = make_batch(vocab_size, mbs, config.seq_length)
        try:
            return time_steps(lambda: side.step(batch), config.warmup, config.steps)
        except torch.OutOfMemoryError:
            raise
        except Exception:
            _print_failure(side.name, f"MBS {mbs}")
            raise

    return sweep(side.name, config.mbs, config.seq_length, run, flops_per_token, peak, free=side.free,
                 record_failures=True)


def _measure_side(side: Side, config: BenchConfig, vocab_size: int, flops_per_token: float, peak: float | None,
                  profiles: dict[str, list[dict]], errors: dict[str, str]) -> list[Measurement]:
    """Move ``side`` to the GPU, sweep it and profile it at its best MBS if asked; then park it and release what its
    steps left on the GPU, whatever happened. A failure is recorded (rows ``failed``, a profile's in ``errors``)
    rather than raised, so the other sides are still measured and the figures already taken reach the report."""
    try:
        try:
            side.activate()
        except Exception as error:
            _print_failure(side.name, "moving it to the GPU")
            return failed_sweep(side.name, config.mbs, config.seq_length, describe(error))
        side_results = _run_side(side, config, vocab_size, flops_per_token, peak)
        best_run = best(side_results)
        if config.profile_dir is not None and best_run is not None:
            batch = make_batch(vocab_size, best_run.mbs, config.seq_length)
            try:
                profiles[side.name] = profile_step(lambda: side.step(batch), config.profile_dir, side.name)
            except Exception as error:
                _print_failure(side.name, "profile")
                errors[side.name] = f"profile: {describe(error)}"
        return side_results
    finally:
        release_memory(side.park)  # frees the gradients, moves the weights to the host, then empties the cache


def run_benchmark(config: BenchConfig) -> BenchReport:
    """Build the sides with shared weights, sweep each (the others parked on the host), profile if asked; a side
    that fails is reported as failed and the others are still measured. MFU is against :meth:`BenchConfig.mfu_peak`
    of ``config`` with the benchmarked GPU's own name filled in (:func:`with_device_gpu`)."""
    card = get_card(config.model)
    flops_per_token = training_flops_per_token(card, config.seq_length, padded_vocab=card.vocab_size).total
    device = torch.cuda.get_device_name()
    config = with_device_gpu(config, device)
    peak = config.mfu_peak()
    sides = build_sides(card, list(config.sides), config.ours_overrides)
    results: list[Measurement] = []
    profiles: dict[str, list[dict]] = {}
    errors: dict[str, str] = {}
    for side in sides.values():
        results += _measure_side(side, config, card.vocab_size, flops_per_token, peak, profiles, errors)
    return BenchReport(
        config={**asdict(config), "profile_dir": str(config.profile_dir) if config.profile_dir else None},
        device=device, flops_per_token=flops_per_token, peak_tflops=peak,
        settings={name: side.settings for name, side in sides.items()}, results=results,
        summary=summary(results, config.sides), profiles=profiles, errors=errors)
