"""Logs of a Megatron that prints every ``log_interval``-th iteration only (releases before megatron-core's line of a
run's first iteration): at ``--log-interval 5`` lines at 5, 10, 15, ..., each the mean of the interval before it
(its timer and counts reset at every line), the first one of iterations 1-5. The table read the run as resumed at
iteration 5: the window 3-10 was refused for "no line for iterations 3-4 ... (this start of the program begins at
5)", and 6-10, which the lines tile, for a line "averaging iterations 5-10". Such a window is now read, as a median
of interval means (the footnote says so); one that is not gets the true reason. Such a log is a fresh start: it has
no megatron line ``successfully loaded checkpoint ... at iteration N`` (N >= 1), which a megatron-core 0.19.2 start
resumed from a checkpoint of iteration 4 prints before its own first line at 5; that line times iteration 5 alone and
the line of 10 averages 5-10 (0.19.2 does not reset its timer after a start's first line), so such a log is read as
resumed at 5. Fresh random step times."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "


def _log(interval: int, total: int) -> tuple[str, list[float]]:
    """The log of a finished run of ``total`` iterations that prints each multiple of ``interval`` only, every line
    the mean of the iterations since the line before, a fresh start (no checkpoint loaded); the text and the
    iterations' own times (ms)."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": total,
                                                           "log_interval": interval})
    centre = random.uniform(60_000.0, 90_000.0)
    times = [centre * 3, centre * 1.5] + [centre * random.uniform(0.95, 1.05) for _ in range(total - 2)]
    lines = [iteration_line(end, total, args["global_batch_size"], round(statistics.mean(times[end - interval:end]), 1),
                            130.0) for end in range(interval, total + 1, interval)]
    return "\n".join([*args_block(args), *lines, DONE]) + "\n", times


def _row(text: str, window: Window):
    return summarise(parse_log_text(text), window, 4)


def test_the_default_window_names_the_warm_up_in_the_first_line_and_a_window_after_it():
    interval = random.choice([5, 10])
    text, _ = _log(interval, 4 * interval)
    assert _row(text, Window()).status == (
        f"the line of iteration {interval} averages iterations 1-{interval}, which begin before the window 3-10 (log "
        f"interval {interval}); give --window {interval + 1}-{2 * interval}, which leaves out the warm-up, or rerun "
        "with --log-interval 1 for a line per iteration")


@pytest.mark.parametrize("statistic", ["median", "mean"])
def test_a_window_the_lines_tile_is_read_as_interval_means(tmp_path, capsys, statistic):
    interval = random.choice([5, 10])
    text, times = _log(interval, 4 * interval)
    window = Window(interval + 1, 3 * interval, statistic)
    row = _row(text, window)
    means = [round(statistics.mean(times[end - interval:end]), 1) for end in (2 * interval, 3 * interval)]
    assert row.ok and row.step_time_s == pytest.approx(window.summarise(means) / 1000, rel=1e-12)
    whole = _row(text, Window(1, 2 * interval, "mean"))  # the warm-up asked for: the first line averages 1-N
    assert whole.ok and whole.step_time_s == pytest.approx(statistics.mean(times[:2 * interval]) / 1000, abs=1e-4)
    path = tmp_path / "slurm-1234.out"
    path.write_text(text)
    assert main(["table", str(path), "--window", str(window), "--statistic", statistic]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        f"{statistic.capitalize()}s of {interval}-iteration means over iterations {window}:")


def test_a_window_without_a_line_names_the_logged_iterations():
    """Iterations 3-9 at log interval 10: no line, and megatron printed no line of iteration 1 either (it was
    "this start of the program begins at iteration 10 (resumed from a checkpoint?)")."""
    text, _ = _log(10, 30)
    assert _row(text, Window(3, 9)).status == (
        "no iteration line in the window 3-9: the log interval is 10, so megatron printed multiples of 10 only; end "
        "the window on one of them")


def _loaded(iteration: int) -> str:
    """megatron-core 0.19.2's line after it loaded a checkpoint of ``iteration`` (``load_checkpoint``)."""
    return (f"  successfully loaded checkpoint from /scratch/ckpt [ t 1/1, gtp_remat 1/1, p 1/4 ] at iteration "
            f"{iteration}")


def test_a_start_resumed_just_before_the_log_interval_keeps_its_warm_up_out():
    """megatron-core 0.19.2 resumed from a checkpoint of iteration ``interval`` - 1: its line at ``interval`` times that
    one iteration (the warm-up after the load), the line at 2 x ``interval`` averages iterations ``interval`` to 2 x
    ``interval``, warm-up included. Read as an older Megatron's log, the window after the first line was ok with a
    step time the warm-up inflates; it is refused, naming the line and the window after it, which is read."""
    interval = random.choice([5, 10])
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 4 * interval,
                                                           "log_interval": interval})
    step = random.uniform(60_000.0, 90_000.0)
    warm_up = step * random.uniform(3, 6)
    averaged = [warm_up, (warm_up + interval * step) / (interval + 1), step, step * random.uniform(0.95, 1.05)]
    lines = [iteration_line(end, 4 * interval, args["global_batch_size"], round(ms, 1), 130.0)
             for end, ms in zip(range(interval, 5 * interval, interval), averaged, strict=True)]
    resumed = "\n".join([*args_block(args), _loaded(interval - 1), *lines, DONE]) + "\n"
    assert _row(resumed, Window(interval + 1, 2 * interval)).status == (
        f"the line of iteration {2 * interval} averages iterations {interval}-{2 * interval}, which begin before the "
        f"window {interval + 1}-{2 * interval} (log interval {interval}); give --window {2 * interval + 1}-"
        f"{3 * interval}, which leaves out the warm-up, or rerun with --log-interval 1 for a line per iteration")
    after = _row(resumed, Window(2 * interval + 1, 3 * interval))
    assert after.ok and after.step_time_s == pytest.approx(round(step, 1) / 1000, rel=1e-12)
    for fresh in ([], [_loaded(0)]):  # no checkpoint, or a converted one (iteration 0): an older Megatron's start
        text = "\n".join([*args_block(args), *fresh, *lines, DONE]) + "\n"
        assert _row(text, Window(interval + 1, 2 * interval)).ok
