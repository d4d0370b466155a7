"""``oellm flops``'s peak: --gpu / --precision / --peak-tflops without a throughput are refused, not silently dropped;
with one they choose the peak, and a precision :func:`peak_tflops` does not know is refused."""

import json
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.peaks import GPU_PEAKS, peak_tflops

ARGV = ["flops", "qwen3-30b-a3b", "--seq-length", "4096"]


def _peak_options(which: str) -> list[str]:
    """One peak option with a fresh value, or all three together (ids with dashes: an id "gpu" marks a GPU test)."""
    options = {"--gpu": ["--gpu", random.choice(sorted(GPU_PEAKS))],
               "--precision": ["--precision", random.choice(["bf16", "fp8"])],
               "--peak-tflops": ["--peak-tflops", f"{random.uniform(100, 3000):.1f}"]}
    return [item for name, option in options.items() if which in (name, "all") for item in option]


@pytest.mark.parametrize("which", ["--gpu", "--precision", "--peak-tflops", "all"])
def test_peak_options_without_a_throughput_are_refused(which: str, capsys: pytest.CaptureFixture[str]) -> None:
    """They used to print the GFLOP table alone with exit 0, as if the chosen peak had been taken into account."""
    options = _peak_options(which)
    assert cli.main([*ARGV, *options]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    named = [option for option in options if option.startswith("--")]
    assert f"{' / '.join(named)} only choose" in captured.err
    assert "--tokens-per-second-per-gpu" in captured.err


def test_peak_options_with_a_throughput_select_the_peak(capsys: pytest.CaptureFixture[str]) -> None:
    """With a throughput the same options still choose the peak; without them it is the H100 SXM BF16 peak."""
    precision = random.choice(["bf16", "fp8"])
    gpu = random.choice([name for name, peak in sorted(GPU_PEAKS.items()) if precision == "bf16" or peak.fp8_tflops])
    throughput = f"{random.uniform(1000, 20000):.0f}"
    assert cli.main([*ARGV, "--json", "--tokens-per-second-per-gpu", throughput, "--gpu", gpu,
                     "--precision", precision]) == 0
    assert json.loads(capsys.readouterr().out)["peak_tflops"] == peak_tflops(gpu, precision)
    assert cli.main([*ARGV, "--json", "--tokens-per-second-per-gpu", throughput]) == 0
    assert json.loads(capsys.readouterr().out)["peak_tflops"] == peak_tflops("h100-sxm", "bf16")


@pytest.mark.parametrize("precision", ["fp16", "BF16", "fp32", ""])
def test_peak_of_an_unknown_precision_is_refused_not_the_fp8_peak(precision):
    """Any precision but ``"bf16"`` returned the FP8 peak: ``fp16`` (dense FP16 = BF16 on Hopper) halved the MFU."""
    with pytest.raises(ValueError, match="precision"):
        peak_tflops(random.choice(["h100-sxm", "h200-sxm", "gh200"]), precision)  # type: ignore[arg-type]


def test_an_mfu_above_100_percent_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    """A throughput per node or per job given as per GPU printed an MFU of thousands of percent without a word; the
    table now ends in a ``warning:`` line naming the option to check. A plausible throughput gets none."""
    peak = random.uniform(500, 1500)
    gflops = json.loads(_flops_json([*ARGV, "--json"], capsys))["gflops_per_token"]
    over = peak * 1e3 / gflops * random.uniform(1.01, 50)  # tokens/s/GPU above the peak
    assert cli.main([*ARGV, "--tokens-per-second-per-gpu", f"{over:.3f}", "--peak-tflops", f"{peak:.3f}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("warning: MFU above 100 %: the throughput exceeds the GPU's peak; check "
                                "--tokens-per-second-per-gpu (per GPU, not per node or job)")
    under = over / random.uniform(60, 100)
    assert cli.main([*ARGV, "--tokens-per-second-per-gpu", f"{under:.3f}", "--peak-tflops", f"{peak:.3f}"]) == 0
    assert "warning" not in capsys.readouterr().out


def _flops_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The stdout of ``oellm ARGV`` (which must succeed)."""
    assert cli.main(argv) == 0
    return capsys.readouterr().out
