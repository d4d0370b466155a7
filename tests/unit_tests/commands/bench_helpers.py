"""Helpers of the ``oellm bench`` command tests: a finished bench report, as a GPU run would return it, for the tests
of what the command does with one (print it, write it to ``--output``) on a machine without a GPU."""

from __future__ import annotations

from dataclasses import asdict

from megatron.oellm.bench.harness import BenchConfig, BenchReport
from megatron.oellm.bench.measure import StepTimes, summary, throughput


def ours_report(step_ms: float) -> BenchReport:
    """A finished bench report of our side alone, one MBS-1 step of ``step_ms`` milliseconds (what a GPU run would
    return), for the tests of what the command does with it."""
    config = BenchConfig(sides=("ours",))
    results = [throughput("ours", 1, 4096, StepTimes((step_ms,), 30 * 2**30, 12.4), 4.6e9, 989.0)]
    return BenchReport(config={**asdict(config), "profile_dir": None}, device="GPU", flops_per_token=4.6e9,
                       peak_tflops=989.0, settings={"ours": {"backend": "torch"}}, results=results,
                       summary=summary(results, config.sides))
