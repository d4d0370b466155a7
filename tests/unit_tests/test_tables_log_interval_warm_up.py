"""At a log interval above 1 the default window 3-10 meets a line that also averages the warm-up (iterations 1-2).
The advice was ``start the window at 1``, whose numbers then include the warm-up, while the footnote said "Medians
over iterations 1-10" of what were the medians of one 10-iteration mean. The advice now names a window after the
warm-up or a rerun with ``--log-interval 1`` (a window with the warm-up only when nothing else is possible, saying
so), and the footnote says "medians of N-iteration means". Fresh random step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "


def _log(tmp_path, interval: int, total: int) -> str:
    """A finished run of ``total`` iterations at log interval ``interval`` (lines at 1 and every multiple), written
    to a file; its path."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": total,
                                                           "log_interval": interval})
    logged = sorted({1, *range(interval, total + 1, interval)})
    times = random_times(len(logged), random.uniform(60_000.0, 90_000.0))
    lines = [iteration_line(i, total, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
             for i, ms in zip(logged, times, strict=True)]
    path = tmp_path / f"interval{interval}_{total}.out"
    path.write_text("\n".join([*args_block(args), *lines, DONE]) + "\n")
    return str(path)


def _table(capsys, *argv: str) -> tuple[str, str]:
    """The status of the one row and the footnote of ``oellm table ARGV``."""
    main(["table", *argv])
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if ".out |" in line)
    return row.rsplit("|", 2)[-2].strip(), out[-1]


def test_a_short_run_is_told_to_log_every_iteration_and_what_a_window_from_1_holds(tmp_path, capsys):
    """Log interval 10 and 10-19 iterations: lines at 1 and 10 only, no window of this log leaves out the warm-up."""
    status, _ = _table(capsys, _log(tmp_path, 10, random.randint(10, 19)))
    assert "start the window at 1" not in status
    assert status.endswith("(log interval 10); rerun with --log-interval 1 for a line per iteration; --window 1-10 "
                           "includes the warm-up (iterations 1-2)")


def test_a_longer_run_is_offered_a_window_after_the_warm_up(tmp_path, capsys):
    interval = random.choice([5, 10])
    status, _ = _table(capsys, _log(tmp_path, interval, 4 * interval))
    assert status.endswith(f"(log interval {interval}); give --window {interval + 1}-{2 * interval}, which leaves out "
                           "the warm-up, or rerun with --log-interval 1 for a line per iteration")
    assert "--window 1-" not in status


@pytest.mark.parametrize("statistic", ["median", "mean"])
def test_the_footnote_says_the_window_is_summarised_from_n_iteration_means(tmp_path, capsys, statistic):
    interval = random.choice([5, 10])
    window = f"{interval + 1}-{3 * interval}"
    status, footnote = _table(capsys, _log(tmp_path, interval, 4 * interval), "--window", window,
                              "--statistic", statistic)
    assert status == "ok"
    assert footnote.startswith(f"{statistic.capitalize()}s of {interval}-iteration means over iterations {window}: "
                               f"megatron's log lines average {interval} iterations each (the log interval).")


def test_a_line_per_iteration_keeps_the_plain_footnote(tmp_path, capsys):
    status, footnote = _table(capsys, _log(tmp_path, 1, 10))
    assert status == "ok" and footnote.startswith("Medians over iterations 3-10. TFLOP/s/GPU:")


def test_logs_at_different_intervals_name_every_lines_iteration_count(tmp_path, capsys):
    """One log at ``--log-interval 1`` beside one at 5 or 10: the footnote names both line lengths (``N = 1, 10``),
    not the plain "Medians over iterations" that fits the first log only."""
    interval = random.choice([5, 10])
    window = f"{interval + 1}-{3 * interval}"
    main(["table", _log(tmp_path, 1, 4 * interval), _log(tmp_path, interval, 4 * interval), "--window", window])
    footnote = capsys.readouterr().out.splitlines()[-1]
    assert footnote.startswith(f"Medians of N-iteration means over iterations {window}, N = 1, {interval}: ")
