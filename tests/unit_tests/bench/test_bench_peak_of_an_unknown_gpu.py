"""``oellm bench`` on a GPU missing from the peak table (a B200, an H800): it measures anyway, with MFU ``n/a`` and one
note naming the option that gives it; ``--peak-tflops`` gives the peak by hand, as ``oellm table`` takes it, and
``--gpu`` takes only the table's names (CPU: CUDA and the sides' steps are faked)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from megatron.oellm import runtime
from megatron.oellm.bench import harness
from megatron.oellm.bench.measure import StepTimes
from megatron.oellm.cards import get_card
from megatron.oellm.cli import build_parser, main
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.peaks import GPU_PEAKS
from tests.unit_tests.peak_devices import KNOWN_DEVICES

TINY = "qwen3.5-35b-a3b-tiny"
SEQ = 64
UNKNOWN_DEVICES = ("NVIDIA B200", "NVIDIA H800", "NVIDIA L40S", "Tesla V100-SXM2-32GB", "NVIDIA GB200")


class FakeSide:
    """A side whose step does nothing; its time comes from :func:`fake_gpu`'s clock."""

    def __init__(self, name: str) -> None:
        self.name, self.settings = name, {}

    def activate(self) -> None:
        pass

    def park(self) -> None:
        pass

    def free(self) -> None:
        pass

    def step(self, batch: int) -> None:
        pass


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> dict[int, float]:
    """A GPU named like none of the peak table's, whose step at MBS ``m`` takes a fresh random time (returned by MBS)."""
    device = random.choice(UNKNOWN_DEVICES)
    step_ms = {mbs: random.uniform(5.0, 50.0) for mbs in (1, 2)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: device)
    monkeypatch.setattr(runtime, "shutdown_single_gpu_runtime", lambda: None)
    monkeypatch.setattr(harness, "build_sides", lambda card, names, overrides: {n: FakeSide(n) for n in names})
    current: list[int] = []

    def make_batch(vocab: int, mbs: int, seq: int, seed: int = 0) -> int:
        current[:] = [mbs]
        return mbs

    monkeypatch.setattr(harness, "make_batch", make_batch)
    monkeypatch.setattr(harness, "time_steps", lambda step, warmup, steps: StepTimes(
        (step_ms[current[0]],) * steps, 2**30, random.uniform(10.0, 13.0)))
    step_ms["device"] = device
    return step_ms


def bench(*argv: str) -> int:
    return main(["bench", "--model", TINY, "--seq-length", str(SEQ), "--mbs", "1,2", "--warmup", "1", "--steps", "2",
                 "--sides", "hf", *argv])


def tflops(step_ms: float, mbs: int) -> float:
    card = get_card(TINY)
    per_token = training_flops_per_token(card, SEQ, padded_vocab=card.vocab_size).total
    return mbs * SEQ / (step_ms / 1e3) * per_token / 1e12


def test_an_unknown_gpu_is_measured_with_mfu_na_and_one_note_naming_the_option(
        fake_gpu: dict, capsys: pytest.CaptureFixture) -> None:
    """It was refused (``no peak known ... pass --gpu``), and no --gpu could name it."""
    assert bench() == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("hf ") and line.split()[1].isdigit()]
    assert [row[:3] for row in rows] == [["hf", "1", "ok"], ["hf", "2", "ok"]]
    for row in rows:
        mbs = int(row[1])
        assert float(row[4].replace(",", "")) == pytest.approx(mbs * SEQ / (fake_gpu[mbs] / 1e3), abs=1)
        assert row[6] == "n/a"
    notes = [line for line in out.splitlines() if "--peak-tflops" in line]
    assert len(notes) == 1 and fake_gpu["device"] in notes[0] and "n/a" in notes[0]


def test_the_json_report_has_no_mfu_and_the_note_goes_to_stderr(fake_gpu: dict,
                                                                capsys: pytest.CaptureFixture) -> None:
    assert bench("--json") == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["peak_tflops"] is None and report["config"]["gpu"] is None
    assert [r["mfu"] for r in report["results"]] == [None, None]
    assert all(r["tflops"] > 0 for r in report["results"])
    assert len(captured.err.strip().splitlines()) == 1 and "--peak-tflops" in captured.err


def test_a_peak_given_by_hand_is_the_mfu_denominator(fake_gpu: dict, capsys: pytest.CaptureFixture) -> None:
    peak = round(random.uniform(100.0, 3000.0), 1)
    assert bench("--peak-tflops", str(peak), "--json") == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["peak_tflops"] == peak and report["config"]["peak_tflops"] == peak
    for r in report["results"]:
        assert r["mfu"] == pytest.approx(tflops(fake_gpu[r["mbs"]], r["mbs"]) / peak, rel=1e-2)
    assert "--peak-tflops" not in captured.err


def test_the_printed_report_names_the_peak_given_by_hand(fake_gpu: dict, capsys: pytest.CaptureFixture) -> None:
    peak = round(random.uniform(100.0, 3000.0), 1)
    assert bench("--peak-tflops", str(peak)) == 0
    out = capsys.readouterr().out
    assert f"MFU vs {peak:g} TFLOP/s (--peak-tflops)" in out
    assert "n/a" not in out


def test_a_gpu_name_outside_the_table_is_a_usage_error_listing_the_table(capsys: pytest.CaptureFixture) -> None:
    """``--gpu`` was any string, refused later by the peak table with a hint at a peak option bench did not have."""
    with pytest.raises(SystemExit) as usage:
        build_parser().parse_args(["bench", "--gpu", random.choice(["b200", "h800", "H100-SXM", "a100-80gb"])])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "argument --gpu: invalid choice" in err and all(name in err for name in GPU_PEAKS)


@pytest.mark.parametrize("peak", ["0", "-312", "nan", "inf", "lots"])
def test_a_peak_that_is_no_positive_number_is_a_usage_error(peak: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as usage:
        build_parser().parse_args(["bench", "--peak-tflops", peak])
    assert usage.value.code == 2 and "argument --peak-tflops" in capsys.readouterr().err


def test_gpu_and_peak_tflops_together_are_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as usage:
        build_parser().parse_args(["bench", "--gpu", random.choice(sorted(GPU_PEAKS)), "--peak-tflops", "500"])
    assert usage.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--gpu or --peak-tflops"):
        harness.BenchConfig(model=TINY, seq_length=SEQ, sides=("hf",), gpu="h100-sxm", peak_tflops=500.0)


def test_a_peak_given_by_hand_on_a_gpu_of_the_table_is_the_mfu_denominator(
        fake_gpu: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``--peak-tflops`` on a GPU whose peak the table knows (an H100) is what MFU is quoted against: the device's
    own peak is not filled in beside it (the config refuses a peak given both ways). Fresh random device and peak."""
    device = random.choice(KNOWN_DEVICES)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: device)
    peak = round(random.uniform(100.0, 3000.0), 1)
    assert bench("--peak-tflops", str(peak), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["peak_tflops"] == peak and report["config"]["gpu"] is None, device
    for r in report["results"]:
        assert r["mfu"] == pytest.approx(tflops(fake_gpu[r["mbs"]], r["mbs"]) / peak, rel=1e-2)
