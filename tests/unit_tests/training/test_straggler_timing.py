"""``--log-straggler`` needs the forward step to time its batch fetch and its model call in megatron's straggler
detector, as megatron's own ``pretrain_gpt`` does; without those sections the detector's report divides by zero at
the first log interval (seen on the H200: ``ZeroDivisionError: float division by zero`` on every rank).

On the CPU the detector's CUDA events and GPU readings are stood in (an event records the host time); the detector
itself, its bookkeeping and its report are megatron-core's.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

import pytest
import torch

from tests.unit_tests.cpu_megatron import gloo_world
from tests.unit_tests.training.forward_step_helpers import forward_step_stand_ins


class _Event:
    """Stands in for a timing ``torch.cuda.Event``: records the host clock, returns milliseconds between two."""

    def __init__(self, **_kwargs):
        self.at = None

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, other: _Event) -> float:
        return (other.at - self.at) * 1e3


@contextmanager
def configured_detector(gpu_readings: bool = True) -> Iterator[object]:
    """megatron's straggler detector (the training loop's instance), configured and enabled as ``--log-straggler``
    configures it on a GPU node: CUDA events stood in, rank 0's control server left out, and with ``gpu_readings``
    the temperature, power, utilisation and clock readings stood in too. Its class flag, state and methods are put
    back after (the detector is a process-wide singleton that other tests' forward steps enter)."""
    from megatron.core.utils import StragglerDetector
    from megatron.training.training import stimer as instance

    saved = dict(vars(instance))
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(StragglerDetector, "_configured", False))
        stack.enter_context(mock.patch.object(StragglerDetector, "_controller", lambda self: None))
        readings = (("temperature", 60), ("power_draw", 500_000), ("utilization", 90), ("clock_rate", 1980))
        for name, value in (("is_available", True), *(readings if gpu_readings else ())):
            stack.enter_context(mock.patch.object(torch.cuda, name, return_value=value))
        stack.enter_context(mock.patch.object(torch.cuda, "Event", _Event))
        stack.enter_context(mock.patch.object(torch.cuda, "synchronize", lambda *args: None))
        stack.enter_context(mock.patch.object(torch.distributed, "get_backend", return_value="gloo"))
        try:
            instance.configure(world=1, rank=0, enabled=True, prefill=4)
            yield instance
        finally:
            vars(instance).clear()
            vars(instance).update(saved)


@pytest.fixture
def detector() -> Iterator[object]:
    """:func:`configured_detector` with its GPU readings stood in."""
    with configured_detector() as instance:
        yield instance


def test_premise_the_report_reads_gpu_temperatures_through_pynvml(monkeypatch):
    """Without pynvml (nvidia-ml-py) megatron's report stops at its temperature reading, which is why the entry
    refuses ``--log-straggler`` there."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with configured_detector(gpu_readings=False) as instance, pytest.raises(ModuleNotFoundError):
        instance.report(total_flops=random.uniform(1e12, 1e15), log_interval=1)


def test_premise_the_report_divides_by_the_timed_sections(detector):
    """Nothing timed since the last report: megatron's report divides the interval's FLOPs by zero time."""
    with pytest.raises(ZeroDivisionError):
        detector.report(total_flops=random.uniform(1e12, 1e15), log_interval=1)


def test_the_forward_step_times_its_batch_and_model_call(detector, monkeypatch):
    """One forward step records one data section (around the batch fetch) and one compute section (around the
    model call), and megatron's report then runs."""

    from megatron.oellm.training import forward_step as module

    forward_step_stand_ins(monkeypatch)
    sections = []

    def fetch(iterator):
        sections.append(("batch", len(detector.start_data_ev), len(detector.stop_data_ev)))
        return dict.fromkeys(module.BATCH_KEYS, next(iterator))

    monkeypatch.setattr(module, "next_batch", fetch)

    class Model(torch.nn.Module):
        vp_stage = None

        def forward(self, tokens, position_ids, attention_mask, labels=None, loss_mask=None):
            sections.append(("model", len(detector.start_gemm_ev), len(detector.stop_gemm_ev)))
            return tokens.float()

    module.forward_step(iter([torch.randint(0, 100, (2, 8))]), Model())
    # inside each section its start is recorded and its stop not yet
    assert sections == [("batch", 1, 1), ("model", 1, 1)]
    assert [event.at is not None for event in (*detector.start_data_ev, *detector.stop_data_ev)] == [True, True]
    assert [event.at is not None for event in (*detector.start_gemm_ev, *detector.stop_gemm_ev)] == [True, True]
    with gloo_world():
        detector.report(total_flops=random.uniform(1e12, 1e15), log_interval=1)
    assert detector.start_gemm_ev == [] and detector.start_data_ev == []  # read and reset for the next interval
