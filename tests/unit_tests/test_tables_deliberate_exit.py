"""``oellm table`` on runs that megatron stopped early on purpose (``--exit-interval``, ``--exit-duration-in-mins``,
``--exit-signal-handler``): the row names the exit instead of calling the run truncated, and keeps the numbers of a
window inside the iterations that ran."""

from __future__ import annotations

import random
import signal
import statistics

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import DeliberateExit, parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

STAMP = "2026-11-30 12:00:00.000000"
SAVE = "/gpfs/scratch/ckpt/run"


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 40 iterations asked for."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 40})


def _saved(iteration: int) -> list[str]:
    """megatron's checkpoint messages (``save_checkpoint``) before it exits."""
    return [f"[{STAMP}] saving checkpoint at iteration {iteration:7d} to {SAVE} in torch_dist format",
            f"  [{STAMP}] successfully saved checkpoint from iteration {iteration:7d} to {SAVE} "
            "[ t 1/1, gtp_remat 0/1, p 1/1 ]"]


def _run(args: dict, logged: list[int], tail: list[str], prefix: str = "") -> tuple[str, dict[int, float]]:
    """A log of one run: the arguments block, lines at ``logged`` iterations with fresh random times, then
    ``tail``; and the times by iteration."""
    times = dict(zip(logged, random_times(len(logged), random.uniform(60000.0, 90000.0)), strict=True))
    lines = [*args_block(args), "> building datasets ..."]
    lines += [iteration_line(i, args["train_iters"], args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
              for i, ms in times.items()]
    return "\n".join(prefix + line for line in lines + tail) + "\n", times


def _status(text: str, window: Window) -> str:
    """The row's status of a log's text."""
    return summarise(parse_log_text(text), window, 4).status


def test_exit_interval_names_the_flag_and_keeps_the_window_inside(args):
    stop = random.randint(12, 30)
    flagged = {**args, "exit_interval": stop, "save": SAVE}
    text, times = _run(flagged, list(range(1, stop + 1)),
                       [*_saved(stop), f"[exiting program at iteration {stop}] datetime: {STAMP} "])
    log = parse_log_text(text)
    assert log.runs[0].deliberate_exit == DeliberateExit("iteration", stop)
    assert _status(text, Window(3, stop + 1)) == f"exited at iteration {stop}/40 (--exit-interval {stop})"
    row = summarise(log, Window(3, stop), 4)
    assert row.ok
    assert row.step_time_s == pytest.approx(statistics.median(times[i] for i in range(3, stop + 1)) / 1000, rel=1e-12)


def test_exit_interval_between_log_lines_names_the_last_line(args):
    """log interval 5, exit interval 12: the last line is at 10, iterations 11-12 ran unlogged."""
    flagged = {**args, "exit_interval": 12, "log_interval": 5}
    text, _ = _run(flagged, [1, 5, 10], [f"[exiting program at iteration 12] datetime: {STAMP} "])
    assert _status(text, Window(6, 15)) == "exited at iteration 12/40 (--exit-interval 12; last line at iteration 10)"
    assert summarise(parse_log_text(text), Window(6, 10), 4).ok


def test_phase_transition_exit_is_named(args):
    flagged = {**args, "phase_transition_iterations": [9, 30]}
    text, _ = _run(flagged, list(range(1, 10)), [f"[exiting program at iteration 9] datetime: {STAMP} "])
    assert _status(text, Window(3, 10)) == "exited at iteration 9/40 (--phase-transition-iterations)"


@pytest.mark.parametrize("message", [
    "[exiting program after 30.01672 minutes] datetime: " + STAMP + " ",
    "Exiting during evaluation, timelimit reached",
])
def test_exit_duration_names_the_flag(args, message):
    stop = random.randint(12, 30)
    flagged = {**args, "exit_duration_in_mins": 30, "save": SAVE}
    text, times = _run(flagged, list(range(1, stop + 1)), [*_saved(stop), message], prefix="0: ")
    assert _status(text, Window(3, 40)) == f"exited after iteration {stop}/40 (--exit-duration-in-mins 30)"
    row = summarise(parse_log_text(text), Window(3, 10), 4)
    assert row.ok
    assert row.step_time_s == pytest.approx(statistics.median(times[i] for i in range(3, 11)) / 1000, rel=1e-12)


@pytest.mark.parametrize("printed, name", [(signal.SIGTERM, "SIGTERM"), ("Signals.SIGUSR1", "SIGUSR1")])
def test_exit_signal_handler_names_the_signal(args, printed, name):
    """``exit_signal`` prints as ``15`` from Python 3.11 (IntEnum), as ``Signals.X`` before; megatron's message
    always says SIGTERM, the block says which signal it caught."""
    stop = random.randint(12, 30)
    flagged = {**args, "exit_signal_handler": True, "exit_signal": printed, "save": SAVE}
    text, _ = _run(flagged, list(range(1, stop + 1)),
                   [*_saved(stop), f"[exiting program after receiving SIGTERM.] datetime: {STAMP} "], prefix="[rank0]: ")
    assert _status(text, Window(3, 40)) == f"exited after iteration {stop}/40 (--exit-signal-handler: {name} received)"


def test_orderly_shutdown_of_exit_signal_handler_for_training(args):
    text, _ = _run({**args, "exit_signal_handler_for_training": True}, list(range(1, 8)),
                   ["", "Termination requested. Performing orderly shutdown."])
    assert _status(text, Window(3, 10)) == (
        "exited after iteration 7/40 (SIGINT or SIGTERM received, --exit-signal-handler-for-training)")


def test_a_run_without_an_exit_message_is_still_truncated(args):
    """The flag alone says nothing: the job may have died before the exit it was asked for."""
    text, _ = _run({**args, "exit_duration_in_mins": 30}, list(range(1, 8)), [])
    assert _status(text, Window(3, 10)) == "truncated at iteration 7/40"


def test_lines_after_the_exit_message_clear_it(args):
    """A resumed run appended without an arguments block continues the iteration count: its lines make it run on
    past the exit, so stopping later is a truncation again."""
    text, _ = _run({**args, "exit_interval": 7}, list(range(1, 8)), [f"[exiting program at iteration 7] datetime: {STAMP} "])
    resumed = text + "\n".join(iteration_line(i, 40, args["global_batch_size"], random.uniform(6e4, 9e4), 120.0)
                               for i in range(8, 12))
    log = parse_log_text(resumed)
    assert log.runs[-1].deliberate_exit is None
    assert _status(resumed, Window(3, 20)) == "truncated at iteration 11/40"


def test_a_new_start_after_the_exit_keeps_it_on_the_first_run(args):
    """A requeued job appends its next start (with its own arguments block) to the log: the exit stays the first
    run's, a window in the second run is read from it."""
    flagged = {**args, "exit_interval": 9}
    first, _ = _run(flagged, list(range(1, 10)), [f"[exiting program at iteration 9] datetime: {STAMP} "])
    second, _ = _run(flagged, list(range(10, 16)), [])
    log = parse_log_text(first + second)
    assert [run.deliberate_exit for run in log.runs] == [DeliberateExit("iteration", 9), None]
    assert _status(first + second, Window(3, 9)) == "ok"
    assert _status(first + second, Window(12, 18)) == "truncated at iteration 15/40"


def test_a_crash_after_the_exit_message_is_still_a_crash(args):
    text, _ = _run({**args, "exit_interval": 9}, list(range(1, 10)), [
        f"[exiting program at iteration 9] datetime: {STAMP} ", "Traceback (most recent call last):",
        '  File "pretrain_gpt.py", line 1, in <module>', "RuntimeError: NCCL communicator destroyed"])
    assert _status(text, Window(3, 12)) == "crashed (RuntimeError: NCCL communicator destroyed) at iteration 9"


def test_cli_table_shows_the_exit(args, tmp_path, capsys):
    text, _ = _run({**args, "exit_duration_in_mins": 45}, list(range(1, 9)),
                   [f"[exiting program after 45.2 minutes] datetime: {STAMP} "])
    path = tmp_path / "train.log"
    path.write_text(text)
    assert main(["table", str(path), "--window", "3-10"]) == 1  # no row has numbers
    assert "| exited after iteration 8/40 (--exit-duration-in-mins 45) |" in capsys.readouterr().out
