"""``time_steps`` and ``run_benchmark`` on the CPU, with a fake ``torch.cuda`` clock and stand-in sides: what is
inside the timed region, when the peak memory is reset and read, and that both sides are measured alike."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

from megatron.oellm.backends import selection
from megatron.oellm.bench import harness
from megatron.oellm.bench.measure import StepTimes
from megatron.oellm.bench.timing import time_steps
from megatron.oellm.cards import get_card
from megatron.oellm.flops import training_flops_per_token
from tests.unit_tests.bench.fake_profiler import install_fake_profiler


class FakeCuda:
    """A GPU whose clock advances only inside steps and whose allocator peak the steps set; every call is logged."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.allocated = 0
        self.peak = 0
        self.log: list[str] = []
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.time: float | None = None

            def record(self) -> None:
                fake.log.append("record")
                self.time = fake.clock

            def elapsed_time(self, end: Event) -> float:
                assert fake.log[-1] in ("sync", "elapsed"), "events read before the final synchronisation"
                fake.log.append("elapsed")
                return end.time - self.time

        self.Event = Event

    def synchronize(self) -> None:
        self.log.append("sync")

    def reset_peak_memory_stats(self) -> None:
        self.log.append("reset")
        self.peak = self.allocated

    def max_memory_allocated(self) -> int:
        self.log.append("max")
        return self.peak

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("Event", "synchronize", "reset_peak_memory_stats", "max_memory_allocated"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))


@pytest.mark.parametrize("several_warmups", [False, True], ids=["one warm-up", "several warm-ups"])
def test_time_steps_times_only_the_timed_steps_each_alone(several_warmups: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Both warm-up counts every run: with one drawn from 1..4, a loop that ran one warm-up step too few passed
    whenever 1 was drawn (there is nothing to drop from one)."""
    rng = random.Random(random.random())
    warmup, steps = rng.randint(2, 4) if several_warmups else 1, rng.randint(1, 6)
    durations = [rng.uniform(1e3, 1e4) for _ in range(warmup)] + [rng.uniform(10.0, 100.0) for _ in range(steps)]
    peaks = [rng.randint(1, 2**40) for _ in durations]
    gpu = FakeCuda()
    gpu.allocated = 5
    gpu.install(monkeypatch)
    calls = iter(range(len(durations)))

    def step() -> torch.Tensor:
        i = next(calls)
        gpu.log.append("step")
        gpu.clock += durations[i]
        gpu.peak = max(gpu.peak, peaks[i])
        return torch.tensor(10.0 + i)

    times = time_steps(step, warmup, steps)
    assert times.step_ms == pytest.approx(durations[warmup:])  # warm-up excluded, one step per event pair
    assert times.loss == 10.0  # the first warm-up step's loss
    assert times.peak_memory_bytes == max(peaks)  # this run's peak, warm-up included
    assert gpu.log == (["sync", "reset"] + ["step"] * warmup + ["record", "step", "record"] * steps
                       + ["sync"] + ["elapsed"] * steps + ["max"])


def test_time_steps_peak_is_this_runs_not_an_earlier_one(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeCuda()
    gpu.install(monkeypatch)
    gpu.peak, gpu.allocated = 100 * 2**30, 2**30  # an earlier, larger run

    def step() -> torch.Tensor:
        gpu.peak = max(gpu.peak, 3 * 2**30)
        return torch.tensor(1.0)

    assert time_steps(step, 1, 1).peak_memory_bytes == 3 * 2**30


@pytest.mark.parametrize("steps", [1, 4, 7])
def test_kernel_tools_median_is_of_the_timed_runs_each_synchronised(steps: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``median_ms`` (the ``tools/`` kernel benchmarks) had no CPU test: its median must leave the warm-up runs out
    (they are 10 to 100 times slower here, as a first call that compiles or autotunes is), be a median, not a mean, and
    read each run's events only after the synchronisation that ends that run."""
    from megatron.oellm.bench.timing import median_ms

    rng = random.Random(random.random())
    warmup = rng.randint(1, 4)
    durations = [rng.uniform(1e3, 1e4) for _ in range(warmup)] + [rng.uniform(10.0, 100.0) for _ in range(steps)]
    durations[-1] = 1e5  # one stray slow timed run: a median ignores it, a mean does not
    gpu = FakeCuda()
    gpu.install(monkeypatch)
    calls = iter(durations)

    def step() -> None:
        gpu.log.append("step")
        gpu.clock += next(calls)

    timed = sorted(durations[warmup:])
    mid = len(timed) // 2
    expected = timed[mid] if len(timed) % 2 else (timed[mid - 1] + timed[mid]) / 2
    assert median_ms(step, warmup, steps) == pytest.approx(expected)
    assert gpu.log == ["record", "step", "record", "sync"] * warmup + ["record", "step", "record", "sync",
                                                                       "elapsed"] * steps


def test_profile_shares_are_of_the_gpu_kernels_alone(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``profile_step`` with torch's profiler faked (CPU): an operator such as ``aten::mm`` carries the CUDA time of
    the kernel it launched as its own, so the shares and milliseconds the report prints must come from the GPU kernels
    only (profiler times are in microseconds), largest first, and both tables must be written."""
    from types import SimpleNamespace

    from megatron.oellm.bench.timing import profile_step

    rng = random.Random(random.random())
    big_us, small_us = rng.uniform(2e3, 5e3), rng.uniform(1e2, 1e3)
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [SimpleNamespace(key="small_kernel", count=3, self_device_time_total=small_us, device_type=cuda),
              SimpleNamespace(key="aten::mm", count=2, self_device_time_total=big_us, device_type=cpu),
              SimpleNamespace(key="big_kernel", count=2, self_device_time_total=big_us, device_type=cuda)]

    install_fake_profiler(monkeypatch, events, lambda kwargs: f"table sorted by {kwargs['sort_by']}")
    stepped = []
    kernels = profile_step(lambda: stepped.append(1), tmp_path / "prof", "ours")
    total = big_us + small_us
    assert kernels == [
        {"name": "big_kernel", "calls": 2, "cuda_ms": pytest.approx(big_us / 1000),
         "share": pytest.approx(big_us / total)},
        {"name": "small_kernel", "calls": 3, "cuda_ms": pytest.approx(small_us / 1000),
         "share": pytest.approx(small_us / total)}]
    assert len(stepped) == 2  # one warm-up step, one profiled
    for suffix in ("", "_by_shape"):
        written = (tmp_path / "prof" / f"ours_top_cuda{suffix}.txt").read_text()
        assert written == "table sorted by self_device_time_total"


@dataclass
class FakeSide:
    """A stand-in :class:`megatron.oellm.bench.sides.Side` that records where it is and what it was asked."""

    name: str
    gpu: set[str]
    oom_from: int | None = None
    freed: int = 0
    settings: dict | None = None

    def activate(self) -> None:
        self.gpu.add(self.name)

    def park(self) -> None:
        self.free()
        self.gpu.discard(self.name)

    def free(self) -> None:
        self.freed += 1

    def step(self, batch) -> torch.Tensor:
        assert self.gpu == {self.name}, f"{self.name} stepped with {sorted(self.gpu)} on the GPU"
        mbs = batch[0]
        if self.oom_from is not None and mbs >= self.oom_from:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return torch.tensor(float(mbs))


def fake_benchmark(monkeypatch: pytest.MonkeyPatch, order: tuple[str, ...], device: str = "NVIDIA H200",
                   gpu_name: str | None = None):
    """``run_benchmark`` of stand-in sides (hf runs out of memory at MBS 8; larger MBS, faster steps) with the GPU
    work faked: (report, sides, the batches each side stepped on, the batch each side was profiled on)."""
    gpu: set[str] = set()
    sides = {"ours": FakeSide("ours", gpu, settings={}), "te": FakeSide("te", gpu, settings={}),
             "hf": FakeSide("hf", gpu, oom_from=8, settings={})}
    batches: dict[str, list[tuple]] = {"ours": [], "te": [], "hf": []}
    profiled: dict[str, tuple] = {}
    current_batch: list[tuple] = []

    def fake_time_steps(step, warmup: int, steps: int) -> StepTimes:
        loss = step()
        name = next(iter(gpu))
        batches[name].append(current_batch[0])
        return StepTimes((10.0 + current_batch[0][0],) * steps, 2**30, float(loss))  # larger MBS, faster

    def fake_make_batch(vocab: int, mbs: int, seq: int, seed: int = 0) -> tuple:
        current_batch[:] = [(mbs, seq, seed, vocab)]
        return current_batch[0]

    def fake_profile(step, out_dir, name: str) -> list[dict]:
        step()
        profiled[name] = current_batch[0]
        return []

    monkeypatch.setattr(harness, "build_sides", lambda card, names, overrides: {n: sides[n] for n in names})
    monkeypatch.setattr(harness, "make_batch", fake_make_batch)
    monkeypatch.setattr(harness, "time_steps", fake_time_steps)
    monkeypatch.setattr(harness, "profile_step", fake_profile)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: device)
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)  # the te side's check passes
    monkeypatch.setattr(selection, "te_missing_kernels", lambda **features: {})
    config = harness.BenchConfig(model="qwen3.5-35b-a3b-tiny", seq_length=64, mbs=(4, 1, 8, 2), sides=order,
                                 profile_dir=harness.Path("prof"), gpu=gpu_name)
    return harness.run_benchmark(config), sides, batches, profiled


@pytest.mark.parametrize("order", [("ours", "hf"), ("hf", "ours")])
def test_run_benchmark_measures_each_side_alone_on_the_same_batches(order: tuple[str, ...],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    report, sides, batches, profiled = fake_benchmark(monkeypatch, order)
    assert [(r.side, r.mbs, r.status) for r in report.results] == [
        (side, mbs, "oom" if side == "hf" and mbs == 8 else "ok") for side in order for mbs in (1, 2, 4, 8)]
    assert batches["hf"] == batches["ours"][:3]  # the same batches, MBS by MBS
    assert not (sides["ours"].gpu or sides["hf"].gpu) and sides["hf"].freed == 2  # the OOM and the park
    assert profiled == {"ours": (8, 64, 0, 512), "hf": (4, 64, 0, 512)}  # each at its best MBS
    by_key = {(r.side, r.mbs): r for r in report.results}
    for mbs in (1, 2, 4):  # the same step time gives the same figures whichever side it is
        ours, hf = by_key[("ours", mbs)], by_key[("hf", mbs)]
        assert (ours.tokens_per_step, ours.tokens_per_s, ours.tflops, ours.mfu) == (
            hf.tokens_per_step, hf.tokens_per_s, hf.tflops, hf.mfu)


def test_running_out_of_memory_is_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep goes up until a micro-batch size runs out of memory, so an ``oom`` row (and the ``skipped`` ones after
    it) is the normal end of a side's sweep: no ``failed:`` line, and no failed side to make ``oellm bench`` exit 1."""
    report = fake_benchmark(monkeypatch, ("ours", "hf"))[0]
    assert [r.status for r in report.results if r.side == "hf"] == ["ok", "ok", "ok", "oom"]
    assert report.failures() == [] and report.failed_sides() == []


def test_the_te_side_is_measured_alone_on_the_same_batches_in_the_order_given(monkeypatch: pytest.MonkeyPatch) -> None:
    report, sides, batches, _ = fake_benchmark(monkeypatch, ("te", "ours", "hf"))
    assert [r.side for r in report.results] == ["te"] * 4 + ["ours"] * 4 + ["hf"] * 4
    assert batches["te"] == batches["ours"] and batches["hf"] == batches["te"][:3]
    assert not any(side.gpu for side in sides.values())
    assert report.summary["speedup_ours_over_te"] == pytest.approx(1.0)  # the same step times
    assert set(report.summary) >= {"speedup_ours_over_hf", "speedup_te_over_hf"}


@pytest.mark.parametrize(("device", "gpu_name", "gpu", "peak"), [
    ("NVIDIA H100 PCIe", None, "h100-pcie", 756.5), ("NVIDIA H200 NVL", None, "h200-nvl", 835.5),
    ("NVIDIA GH200 480GB", None, "gh200", 989.0), ("NVIDIA H100 PCIe", "h100-sxm", "h100-sxm", 989.0)])
def test_mfu_is_against_the_benchmarked_gpu_unless_told(device: str, gpu_name: str | None, gpu: str, peak: float,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """MFU and TFLOP/s from the faked step times (``10 + MBS`` ms at 64 tokens per sequence) and the corrected
    training FLOPs of the card at that length and its unpadded vocabulary (transformers' side does not pad it)."""
    report = fake_benchmark(monkeypatch, ("ours",), device, gpu_name)[0]
    assert report.peak_tflops == peak and report.device == device
    assert report.config["gpu"] == gpu  # GH200's peak is also H200 SXM's: the name tells them apart
    card = get_card("qwen3.5-35b-a3b-tiny")
    flops_per_token = training_flops_per_token(card, 64, padded_vocab=card.vocab_size).total
    assert report.flops_per_token == pytest.approx(flops_per_token)
    for r in report.results:
        tflops = r.mbs * 64 / ((10.0 + r.mbs) / 1e3) * flops_per_token / 1e12
        assert r.tflops == pytest.approx(tflops) and r.mfu == pytest.approx(tflops / peak)


def test_an_unknown_gpu_is_measured_without_mfu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU missing from the peak table was refused; it is measured, with no MFU (``n/a``) rather than one against
    another GPU's peak. A name outside the table is still refused."""
    report = fake_benchmark(monkeypatch, ("ours",), "NVIDIA B200")[0]
    assert report.peak_tflops is None and report.config["gpu"] is None
    assert all(r.mfu is None and r.tflops > 0 for r in report.results if r.status == "ok")
    with pytest.raises(ValueError, match="unknown GPU"):
        harness.BenchConfig(gpu="h300")


def test_kernel_tools_refuse_counts_without_a_timed_step(capsys: pytest.CaptureFixture) -> None:
    """``--steps 0`` left the tools' median without a value (a ``StatisticsError`` after the GPU work)."""
    import argparse

    from megatron.oellm.bench.timing import add_kernel_timing_options

    parser = argparse.ArgumentParser()
    add_kernel_timing_options(parser)
    assert vars(parser.parse_args(["--warmup", "0", "--steps", "1"])) == {"tokens": 32768, "warmup": 0, "steps": 1}
    for flag, bad, wanted in (("--steps", "0", "a positive"), ("--warmup", "-1", "a non-negative"),
                              ("--tokens", "0", "a positive"), ("--steps", "x", "a positive")):
        with pytest.raises(SystemExit):
            parser.parse_args([flag, bad])
        assert f"argument {flag}: expected {wanted} integer, got {bad!r}" in capsys.readouterr().err


def test_kernel_tools_refuse_an_unknown_card_as_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    """A misspelt ``--card`` was a ``CardError`` traceback from the tool's ``get_card``; now argparse names it."""
    from megatron.oellm.bench.timing import kernel_tool_parser

    parser = kernel_tool_parser("Time something.\n\nMore.", with_card=True)
    assert parser.parse_args(["--card", "qwen3-30b-a3b-proxy-2L"]).card == "qwen3-30b-a3b-proxy-2L"
    assert parser.parse_args([]).card == "qwen3.5-35b-a3b"
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--card", "qwen3.5-35b-a3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --card: unknown model 'qwen3.5-35b-a3'" in err and "qwen3.5-35b-a3b-tiny" in err


def test_the_rms_norm_tool_refuses_to_time_eager_against_eager() -> None:
    """With ``OELLM_EAGER_RMS_NORM=1`` exported, ``rms_norm`` takes the eager path too: the tool timed eager against
    eager and printed a speed-up of about 1x as the kernels'. It now stops with a usage error before any GPU work."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from megatron.oellm.switches import EAGER_RMS_NORM

    root = Path(__file__).parents[3]
    env = {**os.environ, EAGER_RMS_NORM: "1", "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, str(root / "tools" / "bench_rms_norm.py"), "--steps", "1"], env=env,
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"error: {EAGER_RMS_NORM}=1 is set" in done.stderr


@pytest.mark.parametrize("tool", ["bench_experts", "bench_router", "bench_rms_norm"])
def test_the_kernel_tools_without_cuda_say_so_in_one_line(tool: str) -> None:
    """Without a GPU each tool stopped at its first CUDA tensor (or the runtime's start) with a traceback; now a usage
    error says it needs one, after the argument checks (a bad ``--steps`` is still named first)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from megatron.oellm.switches import EAGER_RMS_NORM

    root = Path(__file__).parents[3]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop(EAGER_RMS_NORM, None)
    script = str(root / "tools" / f"{tool}.py")
    tokens = str(random.randint(1, 64))
    done = subprocess.run([sys.executable, script, "--tokens", tokens, "--warmup", "0", "--steps", "1"], env=env,
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{tool}.py: error: needs a CUDA GPU" in done.stderr and done.stdout == ""
    bad = subprocess.run([sys.executable, script, "--steps", "0"], env=env, cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "argument --steps" in bad.stderr and "CUDA" not in bad.stderr, bad.stderr[-2000:]
