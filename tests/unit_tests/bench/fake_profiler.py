"""A stand-in for torch's profiler on the CPU, for the tests of :func:`megatron.oellm.bench.timing.profile_step`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch


def install_fake_profiler(monkeypatch: pytest.MonkeyPatch, events: Sequence[object],
                          table: Callable[[dict], str]) -> None:
    """Make ``torch.profiler.profile`` a context manager whose ``key_averages()`` returns ``events`` (objects with
    ``key``, ``count``, ``self_device_time_total`` and ``device_type``), whose table text is ``table(kwargs)`` for
    the keyword arguments ``profile_step`` passes, and make ``torch.cuda.synchronize`` a no-op."""

    class Averages(list):
        def table(self, **kwargs) -> str:
            return table(kwargs)

    class FakeProfile:
        def __init__(self, **kwargs) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

        def key_averages(self, group_by_input_shape: bool = False) -> Averages:
            return Averages(events)

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
