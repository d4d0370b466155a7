"""megatron-core's MoE metrics tracker in a hybrid model (see ``patches/hybrid-moe-metrics.md``).

megatron-core 0.19.2's routers record each metric (load-balancing loss, z-loss) at their layer number among all layers
of the stack, in a per-layer tensor of ``config.num_layers`` entries. In a hybrid model (Qwen3.5: ``G E G E G E * E
...``) both count the mixer layers too. Two things follow:

* **Pipeline ranks without MoE blocks.** ``training_log`` passes the count of ``E`` symbols (its
  ``get_hybrid_layer_counts``) as ``num_layers``, so a pipeline rank whose stages hold no MoE block (a layout such
  as ``E|t*20|t*20|L``) pre-creates each metric with that many entries, while the other ranks recorded all-layer
  tensors. The tracker's all-reduce over the pipeline group
  then gets tensors of different sizes at the first log interval: gloo aborts on it, NCCL reads past the shorter one.
* **Per-layer series** (``--moe-per-layer-logging``) are written one per tensor entry, ``moe/<metric>_layer_<i>``, so
  they are numbered by position in ``--hybrid-layer-pattern`` and every mixer position writes a series of zeros:
  Qwen3.5-35B-A3B's 40 MoE blocks give 80 series per metric, its first block ``layer_1``.

No argument or hook sizes or renames the tracker's tensors, so this patch wraps two of its methods.
``ensure_initialized`` (called only by ``report`` for metrics a rank did not record) creates the all-layer size the
routers record with. ``_log_per_layer`` sees, for the call's duration, each metric's entries at the pattern's ``E``
positions (any multi-token-prediction entries after the main pattern kept behind them), so ``layer_<i>`` is the i-th
MoE block, which in Qwen3.5 is decoder layer i, as in a GPT model and in Hugging Face's layer numbering. The averages
on the log line and the reductions are untouched. Exactly 0.19.2 (another release keeps upstream's methods, with a
warning).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from megatron.oellm.patches.release import applies_to, megatron_core_release, without_patch_layers

MOE_SYMBOL = "E"
PIPE_SEPARATOR = "|"


def moe_positions(hybrid_layer_pattern: str) -> tuple[list[int], int]:
    """0-based positions of the MoE blocks among the layers of ``hybrid_layer_pattern``'s main part (megatron-core's
    parse, pipeline ``|`` removed, the multi-token-prediction part after ``/`` left out), and its layer count."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import parse_hybrid_pattern

    main = parse_hybrid_pattern(hybrid_layer_pattern).main_pattern.replace(PIPE_SEPARATOR, "")
    return [position for position, symbol in enumerate(main) if symbol == MOE_SYMBOL], len(main)


def apply(hybrid_layer_pattern: str) -> bool:
    """Make ``MoEMetricsTracker`` size and write the metrics of a model with ``hybrid_layer_pattern`` as described
    above; True if applied. Applying again (another run in one process) replaces the earlier pattern instead of
    stacking."""
    if not applies_to(megatron_core_release(), "hybrid-moe-metrics"):
        return False
    from megatron.core.models.hybrid.hybrid_layer_allocation import get_hybrid_layer_counts
    from megatron.core.transformer.moe import moe_logging

    cls = moe_logging.MoEMetricsTracker
    positions, main_layers = moe_positions(hybrid_layer_pattern)
    counted_by_training_log = get_hybrid_layer_counts(hybrid_layer_pattern)[MOE_SYMBOL]
    cls.ensure_initialized = _all_layers_size(counted_by_training_log, main_layers,
                                              without_patch_layers(cls.ensure_initialized))
    cls._log_per_layer = _by_moe_block(positions, main_layers, without_patch_layers(cls._log_per_layer))
    return True


def _all_layers_size(moe_blocks: int, main_layers: int, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (``ensure_initialized``) pre-creating ``main_layers`` entries plus the multi-token-prediction ones
    where ``training_log`` asks for ``moe_blocks`` (its ``E`` count) plus them."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def ensure_initialized(*args: Any, **kwargs: Any) -> None:
        """Upstream's pre-creation with the routers' all-layer size in place of the MoE-block count that
        ``training_log`` passes for a hybrid model (megatron.oellm patch)."""
        bound = signature.bind(*args, **kwargs)
        bound.arguments["num_layers"] += main_layers - moe_blocks
        return original(*bound.args, **bound.kwargs)

    ensure_initialized.oellm_patched = True
    return ensure_initialized


def _by_moe_block(positions: list[int], main_layers: int, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (``_log_per_layer``) writing each metric's entries at ``positions``, then those past
    ``main_layers``, as series 0, 1, ..."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _log_per_layer(*args: Any, **kwargs: Any) -> None:
        """Upstream's per-layer series, written for the MoE blocks only, by MoE-block index (megatron.oellm patch)."""
        bound = signature.bind(*args, **kwargs)
        metrics = bound.arguments["self"]._metrics
        swapped = []
        for name in bound.arguments["metric_names"]:
            entry = metrics.get(name)
            if entry is None:
                continue
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
