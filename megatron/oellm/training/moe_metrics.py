"""The MoE metrics tracker of a training run, installed through megatron-core's ``set_moe_metrics_tracker``.

megatron-core 0.19.2's routers record into, and ``training_log`` reports from, whatever tracker
``get_moe_metrics_tracker()`` returns; :func:`install_moe_metrics_tracker` sets :class:`RunMoEMetricsTracker` there, a
subclass of megatron-core's ``MoEMetricsTracker`` that corrects two things of a run's MoE log (megatron-core's class
itself stays as it is):

* **Load-balancing loss names** (``patches/moe-load-balancing-log-names.md``). ``training_log`` picks the losses to
  report by substring, ``"aux_loss" in args.moe_router_load_balancing_type``, which also holds for
  ``global_aux_loss`` and ``seq_aux_loss``. So it asks for ``load_balancing_loss``, which only the ``aux_loss`` router
  records, with ``force_initialize=True``, and every interval shows ``load_balancing_loss 0`` beside the real value
  (every published card here uses ``global_aux_loss``). ``report`` passes on, of the three load-balancing loss names,
  only those of the run's own types; every other name and argument reaches upstream unchanged. The names depend only
  on the arguments, which all ranks share, so every rank still pre-creates the same entries and the collectives match.
* **Hybrid models** (``patches/hybrid-moe-metrics.md``). The routers record at their layer number among all layers of
  the hybrid stack, in tensors of ``config.num_layers`` entries, mixer layers included. ``training_log`` passes the
  count of ``E`` symbols as ``num_layers``, so a pipeline rank without MoE blocks pre-creates tensors of another size
  than the other ranks recorded and the pipeline all-reduce meets two sizes (gloo aborts, NCCL reads past the shorter
  one); ``ensure_initialized`` (called only by ``report``) pre-creates the routers' all-layer size instead. Per-layer
  series (``--moe-per-layer-logging``) are written one per tensor entry, numbered by pattern position with a series of
  zeros per mixer; ``_log_per_layer`` sees, for the call's duration, each metric's entries at the pattern's ``E``
  positions (multi-token-prediction entries kept behind them), so ``layer_<i>`` is the i-th MoE block. The averages
  and the reductions are untouched.

``ensure_initialized``'s role and ``_log_per_layer`` are megatron-core 0.19.2 internals, so
:func:`install_moe_metrics_tracker` sets the tracker on exactly that release; on another it warns, naming the notes, and
megatron-core's own tracker stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

from megatron.oellm.patches.release import applies_to, megatron_core_release

LOG_NAMES_NOTE = "moe-load-balancing-log-names"
HYBRID_NOTE = "hybrid-moe-metrics"
MOE_SYMBOL = "E"
PIPE_SEPARATOR = "|"

LOSS_NAME_OF_TYPE = {
    "aux_loss": "load_balancing_loss",
    "seq_aux_loss": "seq_load_balancing_loss",
    "global_aux_loss": "global_load_balancing_loss",
}
"""The name under which megatron-core 0.19.2's router records each load-balancing type's loss."""


def unrecorded_loss_names(load_balancing_type: str | Sequence[str]) -> frozenset[str]:
    """The load-balancing loss names that no router of a run with ``load_balancing_type`` (one type, or megatron's
    list of several) records. The types are compared whole, not as substrings."""
    types = {load_balancing_type} if isinstance(load_balancing_type, str) else set(load_balancing_type)
    return frozenset(name for kind, name in LOSS_NAME_OF_TYPE.items() if kind not in types)


def moe_positions(hybrid_layer_pattern: str) -> tuple[list[int], int]:
    """0-based positions of the MoE blocks among the layers of ``hybrid_layer_pattern``'s main part (megatron-core's
    parse, pipeline ``|`` removed, the multi-token-prediction part after ``/`` left out), and its layer count."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import parse_hybrid_pattern

    main = parse_hybrid_pattern(hybrid_layer_pattern).main_pattern.replace(PIPE_SEPARATOR, "")
    return [position for position, symbol in enumerate(main) if symbol == MOE_SYMBOL], len(main)


@dataclass(frozen=True)
class HybridLayout:
    """Where a hybrid model's routers record: the MoE blocks' 0-based ``positions`` among the ``main_layers`` of the
    pattern's main part, and ``moe_blocks``, the ``E`` count that ``training_log`` passes as ``num_layers``."""

    positions: tuple[int, ...]
    main_layers: int
    moe_blocks: int

    @classmethod
    def of(cls, hybrid_layer_pattern: str) -> HybridLayout:
        """The layout of ``hybrid_layer_pattern`` as megatron-core parses and counts it."""
        from megatron.core.models.hybrid.hybrid_layer_allocation import get_hybrid_layer_counts

        positions, main_layers = moe_positions(hybrid_layer_pattern)
        return cls(tuple(positions), main_layers, get_hybrid_layer_counts(hybrid_layer_pattern)[MOE_SYMBOL])

    def per_block(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (one entry per layer the routers count) at the MoE blocks, then the entries past the main
        pattern (multi-token prediction)."""
        kept = [*self.positions, *range(self.main_layers, values.numel())]
        return values.index_select(0, torch.tensor(kept, device=values.device))


class RunMoEMetricsTracker(MoEMetricsTracker):
    """megatron-core's tracker, leaving the load-balancing loss names in ``unrecorded`` out of its report and, for a
    hybrid model (``hybrid``), sizing and writing its metrics as the module docstring says."""

    def __init__(self, unrecorded: frozenset[str], hybrid: HybridLayout | None = None):
        super().__init__()
        self.unrecorded = unrecorded
        self.hybrid = hybrid

    def report(self, loss_scale: float, iteration: int, writer: Any = None, wandb_writer: Any = None,
               per_layer_logging: bool = False, force_initialize: bool = False,
               track_names: str | list[str] | None = None, **options: Any) -> str:
        """Upstream's report, asked only for the load-balancing losses this run's routers record."""
        if track_names is not None:
            names = [track_names] if isinstance(track_names, str) else track_names
            track_names = [name for name in names if name not in self.unrecorded]
        return super().report(loss_scale, iteration, writer, wandb_writer, per_layer_logging, force_initialize,
                              track_names, **options)

    def ensure_initialized(self, name: str, num_layers: int, device: str | torch.device | int | None = None) -> None:
        """Upstream's pre-creation, for a hybrid model with the routers' all-layer size in place of the MoE-block
        count that ``training_log`` passes."""
        if self.hybrid is not None:
            num_layers += self.hybrid.main_layers - self.hybrid.moe_blocks
        super().ensure_initialized(name, num_layers, device)

    def _log_per_layer(self, loss_scale: float, metric_names: list[str], iteration: int, writer: Any,
                       wandb_writer: Any, percentiles: dict[str, list[float]] | None = None) -> None:
        """Upstream's per-layer series, for a hybrid model written for the MoE blocks only, by MoE-block index; the
        tracker's own tensors are put back afterwards (the next interval and the reductions use their layout)."""
        if self.hybrid is None:
            super()._log_per_layer(loss_scale, metric_names, iteration, writer, wandb_writer, percentiles)
            return
        swapped = []
        for name in metric_names:
            entry = self._metrics.get(name)
            if entry is None:
                continue
            swapped.append((entry, entry.values))
            entry.values = self.hybrid.per_block(entry.values)
        try:
            super()._log_per_layer(loss_scale, metric_names, iteration, writer, wandb_writer, percentiles)
        finally:
            for entry, values in swapped:
                entry.values = values


def install_moe_metrics_tracker(load_balancing_type: str | Sequence[str], hybrid_layer_pattern: str | None = None
                                ) -> bool:
    """Make a :class:`RunMoEMetricsTracker` for a run with ``load_balancing_type`` (and, for a hybrid model,
    ``hybrid_layer_pattern``) megatron-core's tracker; True if set. Only on the release the overrides were written for:
    another keeps megatron-core's tracker and warns, naming each note that applies. Installing again (a second run in
    one process) sets a fresh tracker for that run."""
    release = megatron_core_release()
    applies = applies_to(release, LOG_NAMES_NOTE)
    if hybrid_layer_pattern:
        applies = applies_to(release, HYBRID_NOTE) and applies
    if not applies:
        return False
    from megatron.core.transformer.moe.moe_logging import set_moe_metrics_tracker  # after the check: 0.19.2 has it

    hybrid = HybridLayout.of(hybrid_layer_pattern) if hybrid_layer_pattern else None
    set_moe_metrics_tracker(RunMoEMetricsTracker(unrecorded_loss_names(load_balancing_type), hybrid))
    return True
