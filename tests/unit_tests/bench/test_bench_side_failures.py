"""``run_benchmark`` and ``oellm bench`` when a side fails for a reason other than memory (CPU, stand-in sides): the
failure is reported as that side's, the side is parked and its memory released, and the other sides' figures and
ratios survive."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from megatron.oellm.backends import selection
from megatron.oellm.bench import harness, measure
from megatron.oellm.bench.measure import StepTimes, sweep
from megatron.oellm.cli import main

TINY = "qwen3.5-35b-a3b-tiny"


@dataclass
class BrokenSide:
    """A stand-in side that can fail when activated, at a micro-batch size, or when profiled; logs what it did."""

    name: str
    gpu: set[str]
    log: list[str]
    fail_from_mbs: int | None = None
    fail_activate: bool = False
    settings: dict = field(default_factory=dict)

    def activate(self) -> None:
        self.gpu.add(self.name)
        if self.fail_activate:
            raise RuntimeError(f"{self.name} could not be moved to the GPU")

    def park(self) -> None:
        self.free()
        self.gpu.discard(self.name)

    def free(self) -> None:
        self.log.append(f"free {self.name}")

    def step(self, batch: tuple) -> torch.Tensor:
        assert self.gpu == {self.name}, f"{self.name} stepped with {sorted(self.gpu)} on the GPU"
        if self.fail_from_mbs is not None and batch[0] >= self.fail_from_mbs:
            raise RuntimeError(f"{self.name} kernel failed at MBS {batch[0]}")
        return torch.tensor(1.0)


def run_broken(monkeypatch: pytest.MonkeyPatch, sides: dict[str, BrokenSide], profile_fails: str | None = None,
               profile_dir: Path | None = Path("prof")) -> harness.BenchReport:
    """``run_benchmark`` of ``sides`` on MBS 1, 2, 4 with the GPU work faked (larger MBS, faster per token)."""
    current: list[tuple] = []

    def fake_make_batch(vocab: int, mbs: int, seq: int, seed: int = 0) -> tuple:
        current[:] = [(mbs, seq)]
        return current[0]

    def fake_time_steps(step, warmup: int, steps: int) -> StepTimes:
        loss = step()
        return StepTimes((10.0 + current[0][0],) * steps, 2**30, float(loss))

    def fake_profile(step, out_dir, name: str) -> list[dict]:
        if name == profile_fails:
            raise RuntimeError("the profiler broke")
        step()
        return [{"name": "kernel", "calls": 1, "cuda_ms": 1.0, "share": 1.0}]

    monkeypatch.setattr(harness, "build_sides", lambda card, names, overrides: {n: sides[n] for n in names})
    monkeypatch.setattr(harness, "make_batch", fake_make_batch)
    monkeypatch.setattr(harness, "time_steps", fake_time_steps)
    monkeypatch.setattr(harness, "profile_step", fake_profile)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)
    monkeypatch.setattr(selection, "te_missing_kernels", lambda **features: {})
    config = harness.BenchConfig(model=TINY, seq_length=64, mbs=(1, 2, 4), sides=tuple(sides),
                                 profile_dir=profile_dir)
    return harness.run_benchmark(config)


def make_sides(**broken: dict) -> tuple[dict[str, BrokenSide], set[str], list[str]]:
    gpu: set[str] = set()
    log: list[str] = []
    return {name: BrokenSide(name, gpu, log, **broken.get(name, {})) for name in ("ours", "te", "hf")}, gpu, log


def test_a_side_failing_at_one_mbs_is_reported_and_the_others_are_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-memory error of one side used to propagate out of ``run_benchmark``: the sides measured before it were
    lost and the ones after it never ran (and the failing side stayed on the GPU)."""
    sides, gpu, log = make_sides(te={"fail_from_mbs": 2})
    report = run_broken(monkeypatch, sides)
    assert [(r.side, r.mbs, r.status) for r in report.results] == [
        ("ours", 1, "ok"), ("ours", 2, "ok"), ("ours", 4, "ok"),
        ("te", 1, "ok"), ("te", 2, "failed"), ("te", 4, "skipped"),
        ("hf", 1, "ok"), ("hf", 2, "ok"), ("hf", 4, "ok")]
    failed = next(r for r in report.results if r.status == "failed")
    assert failed.error == "RuntimeError: te kernel failed at MBS 2" and failed.tokens_per_s is None
    assert not gpu  # every side parked, the failed one too
    assert log.index("free te") < log.index("free hf")  # the failed step's memory released before hf ran
    assert report.summary["best_te"]["mbs"] == 1  # what te measured before failing is kept
    assert report.summary["speedup_ours_over_hf"] == pytest.approx(1.0)
    assert set(report.profiles) == {"ours", "te", "hf"}
    json.dumps(report.to_dict())


def test_a_side_failing_to_reach_the_gpu_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    sides, gpu, _ = make_sides(ours={"fail_activate": True})
    report = run_broken(monkeypatch, {name: sides[name] for name in ("ours", "hf")})
    assert [(r.side, r.mbs, r.status) for r in report.results] == [
        ("ours", 1, "failed"), ("ours", 2, "skipped"), ("ours", 4, "skipped"),
        ("hf", 1, "ok"), ("hf", 2, "ok"), ("hf", 4, "ok")]
    assert report.results[0].error == "RuntimeError: ours could not be moved to the GPU"
    assert not gpu and report.summary["best_ours"] is None and report.summary["speedup_ours_over_hf"] is None
    assert set(report.profiles) == {"hf"}


def test_a_side_that_never_ran_fails_at_its_smallest_mbs_whatever_the_order_given() -> None:
    """``failed_sweep`` rows are in increasing MBS order like :func:`sweep`'s, the smallest one ``failed`` with the
    error and the larger ones ``skipped``, also when ``--mbs`` lists the sizes out of order or twice."""
    sizes = random.sample([1, 2, 4, 8, 16], 3)
    rows = measure.failed_sweep("te", [*sizes, sizes[0]], 64, "RuntimeError: no GPU memory left to move to")
    low, mid, high = sorted(sizes)
    assert [(r.mbs, r.status, r.error, r.tokens_per_step) for r in rows] == [
        (low, "failed", "RuntimeError: no GPU memory left to move to", 64 * low),
        (mid, "skipped", None, 64 * mid), (high, "skipped", None, 64 * high)]


def test_a_failed_profile_keeps_the_sides_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    sides, gpu, _ = make_sides()
    report = run_broken(monkeypatch, {name: sides[name] for name in ("ours", "hf")}, profile_fails="ours")
    assert [r.status for r in report.results] == ["ok"] * 6
    assert set(report.profiles) == {"hf"}
    assert report.errors == {"ours": "profile: RuntimeError: the profiler broke"}
    assert not gpu


def test_sweep_records_a_failure_only_when_asked() -> None:
    """``sweep`` still lets other errors through by default (``test_sweep_other_errors_propagate``); the harness
    asks it to record them."""
    def run(mbs: int) -> StepTimes:
        if mbs == 2:
            raise ValueError("bad shape")
        return StepTimes((10.0,), 0, 1.0)

    freed: list[bool] = []
    results = sweep("ours", [1, 2, 4], 16, run, 1e9, 989.0, free=lambda: freed.append(True),
                    record_failures=True)
    assert [(r.mbs, r.status, r.error) for r in results] == [
        (1, "ok", None), (2, "failed", "ValueError: bad shape"), (4, "skipped", None)]
    assert freed == [True]
    assert "failed" in measure.format_table(results)


def test_the_command_prints_and_writes_a_partial_report_and_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A failed side's figures are printed and written with the others'; the exit status says a side failed."""
    from megatron.oellm import runtime

    sides, _, _ = make_sides(hf={"fail_from_mbs": 1})
    real_run = harness.run_benchmark
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(runtime, "shutdown_single_gpu_runtime", lambda: None)
    monkeypatch.setattr(harness, "run_benchmark", lambda config: run_broken_config(config))

    def run_broken_config(config: harness.BenchConfig) -> harness.BenchReport:
        monkeypatch.setattr(harness, "run_benchmark", real_run)
        return run_broken(monkeypatch, {name: sides[name] for name in config.sides}, profile_dir=None)

    output = tmp_path / "report.json"
    assert main(["bench", "--model", TINY, "--seq-length", "64", "--mbs", "1,2,4", "--output", str(output)]) == 1
    captured = capsys.readouterr()
    assert "failed" in captured.out and "hf kernel failed at MBS 1" in captured.out
    data = json.loads(output.read_text())
    assert [r["status"] for r in data["results"]] == ["ok"] * 3 + ["failed", "skipped", "skipped"]
    assert "hf" in captured.err  # the exit status is explained
