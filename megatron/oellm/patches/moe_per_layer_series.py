"""A hybrid model's per-layer MoE series, numbered by MoE layer (see ``patches/moe-per-layer-series-hybrid.md``).

With ``--moe-per-layer-logging`` megatron-core 0.19.2's ``MoEMetricsTracker`` writes one TensorBoard / W&B series
per entry of its per-layer tensor, ``moe/<metric>_layer_<i>``. Its routers record at their layer number among all
layers of the stack, which in a hybrid model (Qwen3.5: ``G E G E G E * E ...``) counts the mixer layers too. So the
series of a hybrid model are numbered by position in ``--hybrid-layer-pattern``, and every mixer position writes a
series of zeros: Qwen3.5-35B-A3B's 40 MoE blocks give 80 series per metric, its first block ``layer_1``.

No argument or hook renames the series, so this patch wraps the tracker's ``_log_per_layer``: for the call's duration
each metric's tensor is replaced by its entries at the pattern's ``E`` positions (any multi-token-prediction entries
after the main pattern kept behind them), so ``layer_<i>`` is the i-th MoE block, which in Qwen3.5 is decoder
layer i, as in a GPT model and in Hugging Face's layer numbering. The averages on the log line, the reductions and
every other series are untouched. Exactly 0.19.2 (another release keeps upstream's method, with a warning).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from megatron.oellm.patches.release import PATCHED_RELEASE, megatron_core_release, warn_not_applied

MOE_SYMBOL = "E"
PIPE_SEPARATOR = "|"
MTP_SEPARATOR = "/"


def moe_positions(hybrid_layer_pattern: str) -> tuple[list[int], int]:
    """0-based positions of the MoE blocks among the layers of ``hybrid_layer_pattern``'s main part (pipeline ``|``
    removed, the multi-token-prediction part after ``/`` left out), and the main part's layer count."""
    main = hybrid_layer_pattern.split(MTP_SEPARATOR)[0].replace(PIPE_SEPARATOR, "")
    return [position for position, symbol in enumerate(main) if symbol == MOE_SYMBOL], len(main)


def apply(hybrid_layer_pattern: str) -> bool:
    """Make ``MoEMetricsTracker._log_per_layer`` write a model with ``hybrid_layer_pattern`` by MoE-layer index; True
    if applied. Applying again (another run in one process) replaces the earlier pattern instead of stacking."""
    release = megatron_core_release()
    if release != PATCHED_RELEASE:
        warn_not_applied(release, "moe-per-layer-series-hybrid")
        return False
    from megatron.core.transformer.moe import moe_logging

    cls = moe_logging.MoEMetricsTracker
    original = cls._log_per_layer
    while getattr(original, "oellm_patched", False):
        original = original.__wrapped__
    cls._log_per_layer = _by_moe_layer(*moe_positions(hybrid_layer_pattern), original)
    return True


def _by_moe_layer(positions: list[int], main_layers: int, original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _log_per_layer(*args: Any, **kwargs: Any) -> None:
        """Upstream's per-layer series, written for the MoE blocks only, by MoE-layer index (megatron.oellm patch)."""
        bound = signature.bind(*args, **kwargs)
        metrics = bound.arguments["self"]._metrics
        swapped = []
        for name in bound.arguments["metric_names"]:
            entry = metrics.get(name)
            if entry is None or entry.values.numel() < main_layers:
                continue  # not recorded, or sized by MoE layers already (a pipeline rank without MoE blocks)
            kept = positions + list(range(main_layers, entry.values.numel()))
            swapped.append((entry, entry.values))
            entry.values = entry.values.index_select(0, torch.tensor(kept, device=entry.values.device))
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            for entry, values in swapped:
                entry.values = values

    _log_per_layer.oellm_patched = True
    return _log_per_layer
