"""Mutation audit 9 of :mod:`megatron.oellm.bench.timing` on the CPU: the refusal of a run without a warm-up step and
the number of kernels a profile returns (torch's CUDA clock and profiler stood in for)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from megatron.oellm.bench.timing import profile_step, time_steps
from tests.unit_tests.bench.fake_profiler import install_fake_profiler


@pytest.mark.parametrize("warmup, steps", [(0, 3), (-1, 2), (2, 0)])
def test_time_steps_refuses_a_run_without_a_warm_up_or_a_timed_step(warmup: int, steps: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss a report compares is the first warm-up step's and the first step is the slow one (allocation,
    autotuning): ``warmup=0`` must be refused naming both counts, before any step runs, not quietly run one
    warm-up step anyway (the caller would report a loss from a step it did not ask for)."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: pytest.fail("synchronised before the counts were checked"))
    stepped: list[int] = []
    with pytest.raises(ValueError) as refused:
        time_steps(lambda: stepped.append(1) or torch.tensor(random.uniform(1.0, 10.0)), warmup, steps)
    assert f"warmup={warmup}" in str(refused.value) and f"steps={steps}" in str(refused.value)
    assert not stepped


def test_profile_returns_the_top_kernels_largest_first(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``profile_step(top=k)`` with more than ``k`` GPU kernels returns exactly the ``k`` largest, largest first, each
    with its share of all kernel time (the kernels left out still count in the total)."""
    rng = random.Random(random.random())
    cuda = torch.autograd.DeviceType.CUDA
    times_us = rng.sample(range(10, 100_000), rng.randint(5, 12))
    events = [SimpleNamespace(key=f"kernel_{i}", count=rng.randint(1, 9), self_device_time_total=float(t),
                              device_type=cuda) for i, t in enumerate(times_us)]
    top = rng.randint(1, len(events) - 1)

    install_fake_profiler(monkeypatch, events, lambda kwargs: f"top {kwargs['row_limit']}")
    kernels = profile_step(lambda: torch.tensor(1.0), tmp_path, "ours", top=top)
    largest = sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:top]
    assert [k["name"] for k in kernels] == [e.key for e in largest]
    assert [k["calls"] for k in kernels] == [e.count for e in largest]
    assert [k["share"] for k in kernels] == pytest.approx([e.self_device_time_total / sum(times_us) for e in largest])
    assert (tmp_path / "ours_top_cuda.txt").read_text() == f"top {top}"


def test_a_profile_whose_kernels_report_no_device_time_gives_zero_shares(tmp_path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU kernels listed without device time (a profiler that could not read the GPU's clock reports 0 for each):
    the step's kernels come back with a share of 0 each, not a division by zero that loses the report (mutation
    audit 17)."""
    rng = random.Random(random.random())
    cuda = torch.autograd.DeviceType.CUDA
    events = [SimpleNamespace(key=f"kernel_{i}", count=rng.randint(1, 9), self_device_time_total=0.0, device_type=cuda)
              for i in range(rng.randint(1, 6))]
    install_fake_profiler(monkeypatch, events, lambda kwargs: "no device time")
    kernels = profile_step(lambda: torch.tensor(1.0), tmp_path, "ours", top=len(events))
    assert [k["calls"] for k in kernels] == [e.count for e in events]
    assert [(k["cuda_ms"], k["share"]) for k in kernels] == [(0.0, 0.0)] * len(events)
