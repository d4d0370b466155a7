"""A log holding two whole runs of the window (the same ``sbatch -o`` file appended by a rerun) gave the last run's
numbers without a word, though the earlier start is passed over silently nowhere else. ``oellm table`` keeps the
row's numbers (the last start that printed a line in the window) and says on stderr which start it read and where
the earlier one is, whatever ended the earlier run: megatron's end-of-training line, its early exit
(``--exit-duration-in-mins``, which the recipes add with ``--save-interval``) or no line at all. Fresh random step
times."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 \n"
EARLY_EXIT = "[exiting program after 25.0 minutes] datetime: 2026-11-30 12:00:00 \n"
CRASH = "Traceback (most recent call last):\n  File \"train.py\", line 1, in step\nRuntimeError: boom\n"


def _run(args: dict, count: int, tail: str) -> tuple[str, list[float]]:
    """One start of the program: iteration lines 1..``count`` (fresh random times), then ``tail``."""
    times = random_times(count, random.uniform(60_000.0, 90_000.0))
    return megatron_log(args, times, [round(random.uniform(100, 140), 1) for _ in times], total=10, tail=tail), times


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 10 iterations asked for."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 10})


def _table(path, capsys) -> tuple[int, str, str]:
    """``oellm table --format csv`` of one log: its exit status, its row and its stderr."""
    status = main(["table", str(path), "--format", "csv"])
    out, err = capsys.readouterr()
    return status, out.splitlines()[1], " ".join(err.split())


def _earlier_run_note(path, first: str, second: str, ended: str) -> str:
    """The ``note:`` for a log of ``first`` then ``second``, each a whole run of the window 3-10 (iterations 1-10),
    whose first run ended as ``ended`` says."""
    end = first.count("\n") + 1  # the second log's first line comes before its arguments block, which starts a run
    total = (first + second).count("\n")
    return (f"note: {path} holds more than one run of the window 3-10: its row gives the numbers of the start of the "
            f"program at lines {end + 1}-{total} (iterations 1-10); an earlier start, lines 1-{end}, ran iterations "
            f"1-10 ({ended}): head -n {end} of the log gives its numbers")


def test_a_log_appended_twice_keeps_the_last_runs_numbers_and_says_so(args, tmp_path, capsys):
    first, _ = _run(args, 10, DONE)
    second, times = _run(args, 10, DONE)
    path = tmp_path / "slurm-1234.out"
    path.write_text(first + second)
    status, row, err = _table(path, capsys)
    step_time = float(row.split(",")[8])
    assert status == 0 and row.startswith(f"{path},qwen3.5-35b-a3b,ok,8,32,")
    assert step_time == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)
    assert _earlier_run_note(path, first, second, "finished") in err


def test_an_earlier_run_that_exited_early_after_the_window_is_named(args, tmp_path, capsys):
    """The first run reached iteration 10 and then megatron's ``--exit-duration-in-mins`` exit: the row gave the
    second run's numbers without a word."""
    timed = {**args, "exit_duration_in_mins": 25}
    first, _ = _run(timed, 10, EARLY_EXIT)
    second, times = _run(timed, 10, DONE)
    path = tmp_path / "slurm-1234.out"
    path.write_text(first + second)
    status, row, err = _table(path, capsys)
    assert status == 0 and row.startswith(f"{path},qwen3.5-35b-a3b,ok,8,32,")
    assert float(row.split(",")[8]) == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)
    assert _earlier_run_note(path, first, second, "exited early: --exit-duration-in-mins 25") in err


def test_an_earlier_run_that_printed_no_end_line_is_named(args, tmp_path, capsys):
    """The first run's lines cover the window and nothing says how it ended (no end-of-training, early-exit or failure
    line) before the second start: its window is as whole as a finished run's, and the row gave the second run's
    numbers without a word."""
    first, _ = _run(args, 10, "")
    second, _ = _run(args, 10, DONE)
    path = tmp_path / "slurm-1234.out"
    path.write_text(first + second)
    status, row, err = _table(path, capsys)
    assert status == 0 and ",ok," in row
    assert _earlier_run_note(path, first, second, "no line says how it ended") in err


def test_an_earlier_start_that_crashed_inside_the_window_is_no_second_run(args, tmp_path, capsys):
    crashed, _ = _run(args, random.randint(3, 9), CRASH)
    rerun, _ = _run(args, 10, DONE)
    path = tmp_path / "slurm-1234.out"
    path.write_text(crashed + rerun)
    status, row, err = _table(path, capsys)
    assert status == 0 and ",ok," in row and "holds more than one run" not in err


def test_an_earlier_start_without_its_arguments_block_is_no_second_run(args, tmp_path, capsys):
    """The file begins mid-run (its first start's arguments block is not in it), then a whole rerun: ``head -n`` of
    the first start gives no row, so the note must not say that it gives its numbers."""
    headless, _ = _run(args, 10, DONE)
    rerun, _ = _run(args, 10, DONE)
    path = tmp_path / "slurm-1234.out"
    path.write_text(headless[headless.index("> building datasets"):] + rerun)
    status, row, err = _table(path, capsys)
    assert status == 0 and ",ok," in row and "holds more than one run" not in err


def test_a_log_of_one_run_gets_no_note(args, tmp_path, capsys):
    path = tmp_path / "slurm-1234.out"
    path.write_text(_run(args, 10, DONE)[0])
    status, row, err = _table(path, capsys)
    assert status == 0 and ",ok," in row and "holds more than one run" not in err
