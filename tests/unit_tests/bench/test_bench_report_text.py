"""The text ``oellm bench`` prints above its table (CPU, a report built by hand): the FLOP count per token and the
peak MFU is quoted against, in the units the lines name."""

import random
from dataclasses import asdict

import pytest

from megatron.oellm.bench.harness import BenchConfig, BenchReport
from megatron.oellm.bench.measure import StepTimes, summary, throughput
from megatron.oellm.commands import bench


@pytest.mark.parametrize(("peak", "printed"), [(756.5, "756.5"), (835.5, "835.5"), (989.0, "989")])
def test_the_header_gives_gflop_per_token_and_the_peak_in_tflops(peak: float, printed: str,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """The peak as given: 756.5 printed as 756 (rounded to a whole number)."""
    gflop = round(random.uniform(1.0, 9.0), 3)  # e.g. 4.637 GFLOP/token is 4.637e9 FLOP/token
    config = BenchConfig(sides=("ours",))
    results = [throughput("ours", 1, 4096, StepTimes((100.0,), 2**30, 12.0), gflop * 1e9, peak)]
    report = BenchReport(config={**asdict(config), "gpu": "h200-sxm", "profile_dir": None}, device="NVIDIA H200",
                         flops_per_token=gflop * 1e9, peak_tflops=peak, settings={"ours": {}}, results=results,
                         summary=summary(results, config.sides))
    bench.print_report(report)
    out = capsys.readouterr().out
    assert f"FLOPs        {gflop:.3f} GFLOP/token (corrected count, training)" in out
    assert f"MFU vs h200-sxm dense bf16 {printed} TFLOP/s" in out
