"""What the tests of the run's MoE metrics tracker (``megatron/oellm/training/moe_metrics.py``) share: megatron-core's
tracker slot emptied for a test, and a snapshot of megatron-core's ``MoEMetricsTracker`` class to show it unchanged."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


def empty_tracker_slot(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """megatron-core's ``moe_logging`` with its tracker slot empty (``get_moe_metrics_tracker`` then makes upstream's
    own tracker), whatever a run installed earlier in the process put back after the test."""
    from megatron.core.transformer.moe import moe_logging

    monkeypatch.setattr(moe_logging, "_MOE_METRICS_TRACKER", None)
    return moe_logging


def upstream_class_attributes() -> dict[str, Any]:
    """The attributes megatron-core's ``MoEMetricsTracker`` class defines now (its methods, by identity)."""
    from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

    return dict(vars(MoEMetricsTracker))
