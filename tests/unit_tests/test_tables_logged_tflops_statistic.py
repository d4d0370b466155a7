"""``oellm table``'s Megatron TFLOP/s/GPU column is summarised like the step time: the window's FLOPs per iteration
(logged rate x iteration time) over the summarised step time. It was the median or mean of the logged rates, which
with jittery iterations is no rate of the median or mean step time (a mean of 1/t is above 1/mean t): 117.9 beside
our 112.4 at 5,873 tokens/s/GPU implied 20.07 GFLOP/token against megatron's logged 19.1052. Generated logs, fresh
random times and FLOP counts."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, megatron_log


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _jittery_times(n: int) -> list[float]:
    """``n`` iteration times (ms), half of them fast and half slow around a random centre, shuffled: the spread that
    sets the mean of the rates apart from the rate of the mean time (by about 5 %)."""
    centre = random.uniform(60000.0, 90000.0)
    times = [centre * (0.8 if i < n // 2 else 1.25) * random.uniform(0.99, 1.01) for i in range(n)]
    random.shuffle(times)
    return [round(ms, 1) for ms in times]


def _rate(tflop_per_iteration: float, ms: float) -> float:
    """The TFLOP/s/GPU megatron logs for an iteration of ``tflop_per_iteration`` TFLOP per GPU taking ``ms``,
    rounded as it prints it."""
    return round(tflop_per_iteration / (ms / 1000.0), 1)


@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_the_logged_column_is_the_logged_count_over_the_summarised_step_time(args, statistic):
    """With a constant FLOP count the Megatron column is that count over the step time of the row under mean and
    median (here an even window, whose median step time is the mean of the middle two), to the digits megatron
    prints; the mean or median of the rates was about 5 % above it."""
    count = random.uniform(8000.0, 12000.0)  # TFLOP per GPU per iteration
    times = [round(random.uniform(200000.0, 250000.0), 1), round(random.uniform(100000.0, 130000.0), 1)]
    times += _jittery_times(30)
    text = megatron_log({**args, "train_iters": len(times)}, times, [_rate(count, ms) for ms in times], total=len(times))
    row = summarise(parse_log_text(text), Window(3, 32, statistic), 4)
    assert row.ok
    step_s = getattr(statistics, statistic)(times[2:]) / 1000.0
    assert row.step_time_s == pytest.approx(step_s)
    assert row.tflops_per_gpu_logged == pytest.approx(count / step_s, rel=2e-3)
    assert row.tflops_per_gpu / row.tflops_per_gpu_logged == pytest.approx(
        row.tflops_per_gpu / (count / step_s), rel=2e-3)  # the two columns differ by the two counts only


def test_lines_averaging_several_iterations_count_each_iteration_once(args):
    """At log interval 5 each line logs the mean time of five iterations and the rate at that time; the window's
    mean FLOPs per iteration over its mean step time is still the logged count over the step time."""
    count = random.uniform(8000.0, 12000.0)
    last, interval = 40, 5
    lines = args_block({**args, "log_interval": interval, "train_iters": last})
    ends = range(interval, last + 1, interval)
    printed = {1: round(random.uniform(200000.0, 250000.0), 1), **dict(zip(ends, _jittery_times(len(ends)), strict=True))}
    lines += [iteration_line(end, last, args["global_batch_size"], ms, _rate(count, ms)) for end, ms in printed.items()]
    row = summarise(parse_log_text("\n".join(lines) + "\n"), Window(11, 40, "mean"), 4)
    assert row.ok and row.line_iterations == (interval,)
    step_s = statistics.mean(printed[end] for end in range(15, last + 1, interval)) / 1000.0
    assert row.step_time_s == pytest.approx(step_s)
    assert row.tflops_per_gpu_logged == pytest.approx(count / step_s, rel=2e-3)


def test_an_odd_median_is_the_logged_rate_of_the_median_iteration(args):
    """With a constant count and an odd number of iterations the median is unchanged: the rate megatron logged for
    the iteration of the median time (counts and times drawn so that every rate is printed exactly)."""
    count = random.choice((4, 8, 16)) * 1000.0
    rates = [100.0, 125.0, 80.0, 160.0, 200.0, 50.0, 250.0, 40.0, 62.5]
    times = [count / rate * 1000.0 for rate in rates]
    random.shuffle(times)
    times = [3 * max(times), 2 * max(times), *times]
    text = megatron_log({**args, "train_iters": len(times)}, times, [count / (ms / 1000.0) for ms in times], total=len(times))
    row = summarise(parse_log_text(text), Window(3, len(times)), 4)
    median_ms = statistics.median(times[2:])
    assert row.ok and row.step_time_s == pytest.approx(median_ms / 1000.0)
    assert row.tflops_per_gpu_logged == pytest.approx(count / (median_ms / 1000.0), rel=1e-12)
