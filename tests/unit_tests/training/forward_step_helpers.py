"""Stand-ins for the megatron globals the training entry's forward step reads: its timers, its arguments and which
pipeline stages read a micro-batch."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest


class _Timer:
    """Stands in for one of megatron's timers: starts and stops nothing."""

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None


def forward_step_stand_ins(monkeypatch: pytest.MonkeyPatch, *, check_for_spiky_loss: bool = False,
                           reads_batch: Callable[[int | None], bool] = lambda vp_stage: True) -> None:
    """Give the forward step megatron's timers (doing nothing), arguments with ``check_for_spiky_loss`` and a
    pipeline-stage test ``reads_batch(vp_stage)`` for the stages that read a micro-batch."""
    import megatron.training
    import megatron.training.utils

    monkeypatch.setattr(megatron.training, "get_timers", lambda: (lambda *args, **kwargs: _Timer()))
    monkeypatch.setattr(megatron.training, "get_args",
                        lambda: SimpleNamespace(check_for_spiky_loss=check_for_spiky_loss))
    monkeypatch.setattr(megatron.training.utils, "is_first_or_last_pipeline_stage", reads_batch)
