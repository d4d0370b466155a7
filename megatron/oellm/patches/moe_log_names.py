"""Log only the load-balancing losses the run's routers record (see ``patches/moe-load-balancing-log-names.md``).

megatron-core 0.19.2's ``training_log`` picks the MoE losses to report by substring: ``"aux_loss" in
args.moe_router_load_balancing_type`` (a string after ``validate_args``) also holds for ``global_aux_loss`` and
``seq_aux_loss``. So it asks the metrics tracker for ``load_balancing_loss``, which only the ``aux_loss`` router
records, with ``force_initialize=True``. The tracker creates it as zeros, and the console line, TensorBoard and W&B
show ``load_balancing_loss 0`` every interval beside the real value. That is every published card here
(``global_aux_loss``).

No argument or hook selects the reported names, so this patch wraps ``MoEMetricsTracker.report``. Of the three
load-balancing loss names, only those of the run's own types pass; every other name (``z_loss``, MTP, percentiles)
and every other argument reaches upstream unchanged. The names depend only on the arguments, which all ranks share, so
every rank still pre-creates the same entries and the tracker's collectives match.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from megatron.oellm.patches.release import applies_to, megatron_core_release, without_patch_layers

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


def apply(load_balancing_type: str | Sequence[str]) -> bool:
    """Make ``MoEMetricsTracker.report`` drop the loss names :func:`unrecorded_loss_names` gives for
    ``load_balancing_type``; True if applied.

    Only on :data:`PATCHED_RELEASE`: another release keeps upstream's method and warns. Applying again, for example
    for a second run in one process, replaces the earlier filter instead of stacking another one.
    """
    if not applies_to(megatron_core_release(), "moe-load-balancing-log-names"):
        return False
    from megatron.core.transformer.moe import moe_logging

    cls = moe_logging.MoEMetricsTracker
    cls.report = _report_without(unrecorded_loss_names(load_balancing_type), without_patch_layers(cls.report))
    return True


def _report_without(unrecorded: frozenset[str], original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def report(*args: Any, **kwargs: Any) -> str:
        """Upstream's report, asked only for the load-balancing losses this run records (megatron.oellm patch)."""
        bound = signature.bind(*args, **kwargs)
        names = bound.arguments.get("track_names")
        if names is not None:
            names = [names] if isinstance(names, str) else names
            bound.arguments["track_names"] = [name for name in names if name not in unrecorded]
        return original(*bound.args, **bound.kwargs)

    report.oellm_patched = True
    return report
