"""``oellm table --window`` on logs written with ``--log-interval`` > 1 (and 1): megatron prints a run's first
iteration and then every multiple of the interval, and its first line's timer is not reset, so the next line averages
that first iteration again. A window that the printed lines tile is read (once per iteration, whatever the line
lengths); one that they do not gets a status naming the log interval. Generated logs, fresh random times."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _times(n: int) -> list[float]:
    """Per-iteration times (ms) of iterations 1..n: two slow warm-up steps, then random steady ones."""
    centre = random.uniform(60000.0, 90000.0)
    return [centre * random.uniform(2.5, 3.5), centre * random.uniform(1.3, 1.7)] + [
        centre * random.uniform(0.95, 1.05) for _ in range(n - 2)]


def _megatron_log(args: dict, times: list[float], interval: int, start: int = 1) -> tuple[str, dict[int, float]]:
    """The log megatron prints for a run of iterations ``start..start+len(times)-1`` at ``interval``: its first
    iteration alone, then each multiple of the interval averaging every iteration since the last reset (the first
    line does not reset). Returns the text and iteration -> the time printed (rounded as megatron prints it)."""
    last = start + len(times) - 1
    run_args = {**args, "log_interval": interval, "train_iters": last}
    lines, printed, since = args_block(run_args), {}, start
    for iteration in range(start, last + 1):
        if iteration == start or iteration % interval == 0:
            ms = round(statistics.mean(times[since - start:iteration - start + 1]), 1)
            printed[iteration] = ms
            lines.append(iteration_line(iteration, last, args["global_batch_size"], ms, 130.0))
            if iteration != start:
                since = iteration + 1
    return "\n".join(lines) + "\n", printed


def _row(text: str, window: Window):
    return summarise(parse_log_text(text), window, 4)


def test_a_window_ending_on_the_first_line_of_log_interval_10_is_read(args, tmp_path, capsys):
    """``--window 1-10`` at log interval 10: lines at 1 and 10, and the line of 10 averages exactly 1-10. It was
    refused as overlapping the line of iteration 1."""
    times = _times(30)
    text, printed = _megatron_log(args, times, 10)
    assert sorted(printed) == [1, 10, 20, 30]
    row = _row(text, Window(1, 10))
    assert row.ok and row.step_time_s == pytest.approx(printed[10] / 1000)
    assert row.step_time_s == pytest.approx(statistics.mean(times[:10]) / 1000, abs=1e-4)
    both = _row(text, Window(1, 20, "mean"))
    assert both.ok and both.step_time_s == pytest.approx((printed[10] + printed[20]) / 2000)
    log = tmp_path / "interval10.log"
    log.write_text(text)
    assert main(["table", str(log), "--window", "1-10", "--format", "csv"]) == 0
    assert ",ok," in capsys.readouterr().out


def test_windows_at_log_interval_5_from_iteration_1(args):
    times = _times(20)
    text, printed = _megatron_log(args, times, 5)
    row = _row(text, Window(1, 10, "mean"))
    assert row.ok and row.step_time_s == pytest.approx((printed[5] + printed[10]) / 2000)
    assert _row(text, Window(6, 20)).step_time_s == pytest.approx(statistics.median([printed[10], printed[15],
                                                                                     printed[20]]) / 1000)


def test_the_median_and_mean_are_over_iterations_when_the_first_line_covers_a_different_count(args):
    """Log interval 1: the line of 2 averages 1-2 and the others one iteration each, so it counts twice. A run
    resumed at 7 with log interval 5: the line of 10 averages 7-10 (4 iterations), that of 15 averages 11-15 (5)."""
    times = _times(10)
    text, printed = _megatron_log(args, times, 1)
    mean = _row(text, Window(1, 10, "mean"))
    assert mean.ok and mean.step_time_s == pytest.approx(statistics.mean(times) / 1000, abs=1e-4)
    median = _row(text, Window(1, 10))
    per_iteration = [printed[2], printed[2], *(printed[i] for i in range(3, 11))]  # line 1 read once, in line 2
    assert median.step_time_s == pytest.approx(statistics.median(per_iteration) / 1000)
    resumed, at = _megatron_log(args, _times(9), 5, start=7)
    assert sorted(at) == [7, 10, 15]
    row = _row(resumed, Window(7, 15, "mean"))
    assert row.ok and row.step_time_s == pytest.approx((4 * at[10] + 5 * at[15]) / 9 / 1000)


def test_megatrons_tflops_are_summarised_over_iterations_as_the_step_time_is(args):
    """Megatron's logged TFLOP/s/GPU column weighs each line by the iterations it averages, as the step time does: a
    run resumed at 7 with log interval 5 prints 7 (averaged again by 10), 10 (7-10, 4 iterations) and 15 (11-15, 5).
    Over 7-15 the mean is the FLOPs of 4 iterations at line 10's rate and time and 5 at line 15's over their time, the
    median, the 5th of the 9, line 15's rate; a summary over the two lines would give their plain average for both."""
    run_args = {**args, "log_interval": 5, "train_iters": 15}
    tflops = {i: round(random.uniform(100.0, 160.0), 1) for i in (7, 10, 15)}
    tflops[15] = round(tflops[10] + random.uniform(5.0, 20.0) * random.choice([-1, 1]), 1)  # apart from line 10's
    times = {i: round(random.uniform(60000.0, 90000.0), 1) for i in (7, 10, 15)}
    lines = [iteration_line(i, 15, args["global_batch_size"], times[i], tflops[i]) for i in (7, 10, 15)]
    text = "\n".join(args_block(run_args) + lines) + "\n"
    mean = _row(text, Window(7, 15, "mean"))
    flops = 4 * tflops[10] * times[10] + 5 * tflops[15] * times[15]
    assert mean.ok and mean.tflops_per_gpu_logged == pytest.approx(flops / (4 * times[10] + 5 * times[15]), rel=1e-12)
    median = _row(text, Window(7, 15))
    assert median.ok and median.tflops_per_gpu_logged == pytest.approx(tflops[15], rel=1e-12)


def test_a_window_without_a_whole_line_names_the_log_interval(args):
    """The default window 3-10 at log interval 10 or 5: the line of 10 (or 5) also averages warm-up iterations 1-2,
    so the row is refused, naming the interval and a window after the warm-up; a window holding no line names the
    interval and which iterations megatron printed."""
    text10, _ = _megatron_log(args, _times(30), 10)
    assert _row(text10, Window()).status == (
        "the line of iteration 10 averages iterations 1-10, which begin before the window 3-10 (log interval 10); "
        "give --window 11-20, which leaves out the warm-up, or rerun with --log-interval 1 for a line per iteration")
    assert _row(text10, Window(11, 20)).ok
    text5, _ = _megatron_log(args, _times(20), 5)
    assert _row(text5, Window()).status == (
        "the line of iteration 5 averages iterations 1-5, which begin before the window 3-10 (log interval 5); "
        "give --window 6-10, which leaves out the warm-up, or rerun with --log-interval 1 for a line per iteration")
    assert _row(text5, Window(6, 10)).ok
    assert _row(text10, Window(3, 9)).status == (
        "no iteration line in the window 3-9: the log interval is 10, so megatron printed iterations 1 and multiples "
        "of 10 only; end the window on one of them")
    assert _row(text10, Window(1, 5)).status.startswith("the window 1-5 ends between log lines")
