"""The types of a scaling table: a row (one log's numbers or why it has none), the iteration window it reads,
the statistic over it, and the error of bad table options.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from megatron.oellm.cards import ModelCard
from megatron.oellm.peaks import GPU_PEAKS
from megatron.oellm.training.throughput import LoggedPeak

DEFAULT_GPU = "h100-sxm"
"""The GPU of the reports' MFU denominator (GH200's nominal peaks are the same)."""

DEFAULT_PEAK_TFLOPS = GPU_PEAKS[DEFAULT_GPU].bf16_tflops
"""The reports' MFU denominator: H100 / GH200 dense BF16 peak (989 TFLOP/s)."""


FlopsPerToken = Callable[[ModelCard, int, int], float]
"""(card, seq_length, padded vocabulary) -> training FLOPs per token."""


@dataclass(frozen=True)
class RowPeak:
    """The peak TFLOP/s per GPU a row's MFU is against, and where the table took it from: the user's ``--gpu`` or
    ``--peak-tflops`` (``given``), else the log's ``[oellm] throughput basis`` line (``logged``, so that the table's
    MFU is against the peak of the log's own ``[oellm]`` lines), else :data:`DEFAULT_PEAK_TFLOPS`."""

    tflops: float
    gpu: str | None
    """Its :data:`~megatron.oellm.peaks.GPU_PEAKS` name; None for a peak given in TFLOP/s."""
    given: bool = False
    """The user's ``--gpu`` or ``--peak-tflops``."""
    logged: LoggedPeak | None = None
    """What the log's basis line names (None: the log has none)."""

    @property
    def log_has_basis(self) -> bool:
        """The table took no peak from the user and the log has a basis line (with a peak or ``MFU n/a``)."""
        return not self.given and self.logged is not None

    @property
    def from_log(self) -> bool:
        """The peak is the log's own."""
        return self.log_has_basis and self.logged.tflops is not None


DEFAULT_ROW_PEAK = RowPeak(DEFAULT_PEAK_TFLOPS, DEFAULT_GPU)
"""The peak of a row whose log names none, without ``--gpu`` or ``--peak-tflops``."""


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
    """One log summarised; the numbers are None unless ``status`` is ``ok``, or ``ok (...)`` saying how the run
    ended badly after the window (:func:`~megatron.oellm.scaling_table.window.with_stop_note`)."""

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
    """Megatron's own ``throughput per GPU``, summarised like the step time (see
    :func:`~megatron.oellm.scaling_table.summary.logged_tflops`)."""
    mfu: float | None = None
    """Fraction of the peak, from our TFLOP/s (None when the model is unknown)."""
    efficiency: float | None = None
    """tokens/s/GPU relative to the baseline row."""
    scaling: str = ""
    """Which of the baseline's series rates the row: ``baseline`` (the row itself),
    ``strong`` (its global batch size) or ``weak`` (its global batch size per GPU); '' for a row without an
    efficiency."""
    model_key: str = field(default="", repr=False)
    """What tells the row's model apart from another of the same :attr:`model` name (see :func:`model_key`); not
    printed, not a CSV column."""
    settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The run's benchmark settings that are no scaling dimension, as (argument, printed value) pairs (see
    :func:`~megatron.oellm.scaling_table.summary.benchmark_settings`; also of a row without numbers whose log has an
    arguments block): part of an ok row's series, and one CSV column each."""
    peak: RowPeak | None = field(default=None, repr=False)
    """The peak of the row's MFU and where it came from (:class:`RowPeak`; None for a row without numbers); the CSV's
    ``peak_tflops`` column, not a column of its own."""
    line_iterations: tuple[int, ...] = field(default=(), repr=False)
    """How many iterations each log line the window's numbers come from averages, each count once, ascending: ``(1,)``
    with a line per iteration, ``(10,)`` at log interval 10 (the footnote's "medians of 10-iteration means"); not a
    CSV column."""

    @property
    def ok(self) -> bool:
        """The row carries numbers: its status is ``ok`` or ``ok (...)``."""
        return self.status == "ok" or self.status.startswith("ok (")


def is_positive_int(value: object) -> bool:
    """``value`` is a positive integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def node_count(nodes: float) -> str:
    """``1 node``, ``8 nodes``, ``0.5 nodes``: a row's node count as the table's header and notes say it."""
    return f"{nodes:g} node{'' if nodes == 1 else 's'}"
