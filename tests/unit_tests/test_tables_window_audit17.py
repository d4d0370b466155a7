"""Tests from a seventeenth mutation audit of the window a table row reads (:mod:`megatron.oellm.scaling_table.window`):
the status of a window with no line in it is the log's last start's, a NaN count alone marks a row, the early-exit
flag named when an iteration is both a phase transition and a multiple of ``--exit-interval`` (or only the former),
the samples consumed before a line's interval read from that line's own start of the program, and a log interval
below 1 read as missing. Fresh random step times, sizes and iterations."""

from __future__ import annotations

import random

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times, resized

DONE = "[after training is done] datetime: 2026-12-06 12:00:00.000000 "
OOM = ["[rank12]: Traceback (most recent call last):", '[rank12]:   File "pretrain.py", line 1, in <module>',
       "[rank12]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]


def _args(**overrides: object) -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe with ``overrides``."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, **overrides})


def _start(args: dict, logged: list[int], tail: list[str]) -> list[str]:
    """One start of the program: its arguments block, lines at the ``logged`` iterations (fresh random times), then
    ``tail``."""
    times = random_times(max(len(logged), 2), random.uniform(60_000.0, 90_000.0))
    lines = [iteration_line(i, args["train_iters"], args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
             for i, ms in zip(logged, times, strict=False)]
    return [*args_block(args), "> building datasets ...", *lines, *tail]


def _status(lines: list[str], window: Window) -> str:
    """The row's status of a log of ``lines``."""
    return summarise(parse_log_text("\n".join(lines) + "\n"), window, 4).status


def test_a_window_without_a_line_gets_the_last_starts_status():
    """A finished short run, then a longer run appended to the same file that printed its arguments and no
    iteration line yet: a window after the short run's end has no line, and the row speaks of the last start (still
    starting), not of the first (whose run ended before the window)."""
    short = random.randint(5, 10)
    first = short + random.randint(2, 5)
    window = Window(first, first + random.randint(5, 10))
    lines = (_start(_args(train_iters=short), list(range(1, short + 1)), [DONE])
             + _start(_args(train_iters=40), [], []))
    assert _status(lines, window).startswith("no iteration line yet (still starting, or stopped before its first "
                                             "iteration of 40;")


def test_a_nan_count_alone_marks_the_row():
    """A window line counting a NaN iteration and no skipped one gives no numbers. megatron-core 0.19.2 counts a
    NaN iteration only among skipped ones, so its own lines never show this; a line of another training loop or a
    hand-joined log must still not give an ok row."""
    args = _args(train_iters=10)
    lines = _start(args, list(range(1, 11)), [DONE])
    at = random.randint(3, 10)
    index = next(k for k, line in enumerate(lines) if f"iteration {at:8d}/" in line)
    lines[index] = lines[index].replace("number of nan iterations:   0", "number of nan iterations:   1")
    assert _status(lines, Window()) == f"skipped steps in the window 3-10: the line of iteration {at} counts 0 skipped, 1 NaN"


def test_an_exit_at_a_phase_transition_names_the_flag_that_made_it():
    """A run with both ``--exit-interval`` and ``--phase-transition-iterations``: an exit at a transition that is
    no multiple of the exit interval names the transitions; one at a transition that is a multiple names
    ``--exit-interval N`` (megatron exits there by the interval either way)."""
    interval = random.randint(5, 9)
    for stop, cause in ((interval * 2 + random.randint(1, interval - 1), "--phase-transition-iterations"),
                        (interval * 2, f"--exit-interval {interval}")):
        args = _args(train_iters=40, exit_interval=interval, phase_transition_iterations=[stop, 35])
        lines = _start(args, list(range(1, stop + 1)),
                       [f"[exiting program at iteration {stop}] datetime: 2026-12-06 12:00:00.000000 "])
        assert _status(lines, Window(3, stop + 1)) == f"exited at iteration {stop}/40 ({cause})"


def test_samples_consumed_before_a_line_come_from_its_own_start():
    """A whole run at log interval 2, then a resubmission with twice the global batch appended to the same file
    that ran out of memory after its line of iteration 2: that later line replaces the first run's line of iteration
    2 in the log's lines, but the first run's line of iteration 4 averages iterations 3-4 of its own batches, so the
    samples it consumed before iteration 3 are not the resubmission's. The row is ok, not a batch-size change."""
    args = _args(train_iters=10, log_interval=2)
    doubled = {**resized(args, 64), "global_batch_size": 2 * args["global_batch_size"]}
    lines = (_start(args, [1, 2, 4, 6, 8, 10], [DONE]) + _start(doubled, [1, 2], OOM))
    log = parse_log_text("\n".join(lines) + "\n")
    assert log.iterations[2].run == 1 and log.iterations[4].run == 0
    assert summarise(log, Window(), 4).status == "ok"


def test_a_log_interval_below_one_is_read_as_missing():
    """An arguments block whose ``log_interval`` is 0 or negative (megatron takes the iteration modulo it, so no run of
    its prints lines under it: a garbled or hand-edited block) gives the row's missing-interval status, not a
    division by zero while the lines' intervals are worked out."""
    for interval in (0, -random.randint(1, 10)):
        lines = _start(_args(train_iters=10, log_interval=interval), list(range(1, 11)), [DONE])
        assert _status(lines, Window()) == "arguments block lacks log_interval"


def test_a_window_whose_only_line_is_cut_names_the_cut_line():
    """Log interval N, window 3-N: the line of iteration N is the window's only one, and another rank's output cut
    into it. The row named the log interval and asked for a window ending on a logged iteration, which 3-N already
    does; it names the cut line (its number in the file) instead."""
    interval = random.randint(4, 10)
    lines = _start(_args(train_iters=3 * interval, log_interval=interval),
                   [1, interval, 2 * interval, 3 * interval], [DONE])
    index = next(k for k, line in enumerate(lines) if f"iteration {interval:8d}/" in line)
    lines[index] = lines[index][:lines[index].index("| elapsed time")] + "[rank3]: WARNING"
    assert _status(lines, Window(3, interval)) == (f"no whole iteration line in the window 3-{interval}: the line of "
                                                   f"iteration {interval} is cut: line {index + 1}")


def test_an_exit_signal_read_as_a_boolean_is_named_sigterm():
    """An ``exit_signal`` the arguments block gives as ``True`` (no signal megatron prints: a garbled block) is no
    signal number: the exit names megatron's default SIGTERM, not signal 1 (SIGHUP)."""
    stop = random.randint(12, 30)
    args = _args(train_iters=40, exit_signal_handler=True, exit_signal=True)
    lines = _start(args, list(range(1, stop + 1)),
                   ["[exiting program after receiving SIGTERM.] datetime: 2026-12-06 12:00:00.000000 "])
    assert _status(lines, Window(3, 40)) == f"exited after iteration {stop}/40 (--exit-signal-handler: SIGTERM received)"
