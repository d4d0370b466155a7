"""Which logged lines a row reads: the window's run (a log may hold several starts), its lines, and the
status that says why a window gives no numbers (a failed or stopped run, missing, cut or extra lines, skipped
steps, a changed batch), or how a run that gives numbers ended badly after the window (SLURM's time limit, a
cancellation or a preemption, or a failure first shown after the line of the window's last iteration was printed
whole).
"""

from __future__ import annotations

import dataclasses
import math
import signal
import time
from collections.abc import Sequence

from megatron.oellm.run_log import CheckpointSave, DeliberateExit, IterationLine, Run, RunLog
from megatron.oellm.scaling_table.rows import ScalingRow, Window, is_positive_int

LAST_RANK_ONLY = ("megatron prints iteration lines from the last rank only: give the last task's output file or a "
                  "combined log")
"""The advice for a log without iteration lines: with one output file per task (``srun -o out.%t``) the first task's
file has the arguments block (printed by rank 0) and no iteration line (printed by the last rank)."""


def window_run(log: RunLog, window: Window) -> Run:
    """The run the window's row is about: the latest start of the program that printed a line in the window, else
    (no line in it) the log's last run."""
    return log.runs[_window_run_index(log, window)]


def _window_run_index(log: RunLog, window: Window) -> int:
    """The index in :attr:`RunLog.runs` of :func:`window_run`."""
    lines = window_lines(log, window)
    return max(line.run for line in lines) if lines else len(log.runs) - 1


def window_status(log: RunLog, window: Window) -> str:
    """'ok' when the window's run (:func:`window_run`) shows no failure and the log's lines average exactly the
    window's iterations (one run, none missing, none reaching before the window) with no skipped step, bad number or
    batch-size change; a run that SLURM stopped, or that failed, only after the window's last line was printed whole
    (:func:`stopped_after`) is ok too (:func:`with_stop_note` says how it ended). Else what went wrong, naming an
    earlier start of the program in the log that ran the whole window (:func:`earlier_start_note`): a requeued start
    appended to a finished run's log must not hide it, nor be passed over silently (an ok row names it in a ``note:``
    instead: :func:`earlier_window_note`)."""
    index = _window_run_index(log, window)
    status = _run_status(log, window, log.runs[index])
    return status if status == "ok" else status + earlier_start_note(log, index, window)


def _run_status(log: RunLog, window: Window, run: Run) -> str:
    """:func:`window_status` of the window's ``run``, earlier starts of the program left out."""
    if run.failure and not stopped_after(run, window):
        return failure_status(run)
    if not run.args:
        return no_arguments_status(run)
    if not run.args_complete:
        return "truncated inside the arguments block"
    total = run.train_iters
    if total is not None and total < window.first:
        return f"run of {total} iterations ends before the window {window}"
    if total is not None and total < window.last:
        return (f"run of {total} iterations ends inside the window {window}: its numbers would cover only "
                f"{window.first}-{total}; give --window {window.first}-{total} for them")
    if run.start is None:
        return no_iteration_status(run)
    if run.last_iteration < window.last and not run.finished:
        return stopped_status(log, run, window)
    lines = window_lines(log, window)
    if not lines:
        return no_line_status(run, window)
    return (_coverage_problem(log, window, lines) or _value_problem(window, lines) or _batch_problem(log, window, lines)
            or "ok")


def stopped_after(run: Run, window: Window) -> bool:
    """``run`` ended badly only after the window: SLURM stopped it for no fault of its own
    (:attr:`Run.stopped_from_outside`: a time limit, ``scancel``, a preemption) once it had printed the line of the
    window's last iteration, or a later one, whole; or its failure's first marker comes after such a line
    (:attr:`Run.failure_after`: an NCCL timeout at teardown, a full disk in the final checkpoint save, W&B failing to
    finish, an out-of-memory error at a later iteration). Megatron prints an iteration's line when the iteration has
    completed, so the window's iterations are as valid as those of a run that went on (benchmarks often ask for many
    iterations and let the time limit end the job). Whole lines only: a line cut by the kill is no proof."""
    if run.stopped_from_outside and run.last_iteration >= window.last:
        return True
    return bool(run.failure) and run.failure_after >= window.last


def with_stop_note(row: ScalingRow, run: Run, window: Window) -> ScalingRow:
    """``row`` (the row of ``run``, the window's run: :func:`window_run`) with the status ``ok (<failure> at iteration
    N, after the window)`` (e.g. ``ok (cancelled (time limit) at iteration 14, after the window)``, ``ok (NCCL timeout
    at iteration 10, after the window)``) when it has numbers and ``run`` ended badly after the window
    (:func:`stopped_after`): the row keeps its numbers and still says how the job ended."""
    if not row.ok or not stopped_after(run, window):
        return row
    return dataclasses.replace(row, status=f"ok ({run.failure} at iteration {run.last_iteration}, after the window)")


def failure_status(run: Run) -> str:
    """The status of a failed run: its failure at its last whole iteration line; one SLURM stopped before any
    iteration line may be one task's output file (:data:`LAST_RANK_ONLY`)."""
    if run.last_iteration:
        return f"{run.failure} at iteration {run.last_iteration}"
    if run.start is None and run.stopped_from_outside:
        return f"{run.failure} before any iteration line; if this is one task's output file, {LAST_RANK_ONLY}"
    return run.failure


def no_arguments_status(run: Run) -> str:
    """The status of a run without an arguments block: a log cut before it, or not a Megatron log; one with
    iteration lines may be the last task's output file (rank 0 prints the block)."""
    if run.start is None:
        return "no arguments block (not a Megatron log, or truncated before it)"
    return ("no arguments block before the iteration lines (truncated before it, or one task's output file: megatron "
            "prints the block from rank 0 only and iteration lines from the last rank only; give a combined log)")


def no_iteration_status(run: Run) -> str:
    """The status of a run with an arguments block and no iteration line, not even a cut one: one that ended
    (megatron's end-of-training or early-exit line) is one task's output file other than the last; else the job is
    still starting (a user checking a running job must not read that it stopped), stopped before its first
    iteration without a marker saying why, or the log is such a file (:data:`LAST_RANK_ONLY`)."""
    if run.finished or run.deliberate_exit is not None:
        return f"no iteration line, though the run ended: {LAST_RANK_ONLY}"
    total = run.train_iters if run.train_iters is not None else "?"
    return (f"no iteration line yet (still starting, or stopped before its first iteration of {total}; if this is "
            f"one task's output file, {LAST_RANK_ONLY})")


def earlier_whole_start(log: RunLog, index: int, window: Window) -> Run | None:
    """The latest start of the program before ``log.runs[index]`` that has its arguments, whose iterations span the
    whole window (its lines there are not looked at: one cut short still counts) and that showed no failure before
    the window's end, however it ended after it: megatron's end-of-training line, its early exit
    (``--exit-duration-in-mins``, which the recipes add with ``--save-interval``), no line at all, or a stop or
    failure after the window (:func:`stopped_after`); None when there is none. A start whose failure shows
    inside the window, or whose arguments block the log lacks (a file that begins mid-run), gives no numbers of its
    own (``head -n`` of it gets no row), so it is no second run of the window."""
    for earlier in reversed(log.runs[:index]):
        start = first_averaged(earlier)
        whole = start is not None and start <= window.first and earlier.last_iteration >= window.last
        if whole and earlier.args_complete and (not earlier.failure or stopped_after(earlier, window)):
            return earlier
    return None


def _ended(run: Run) -> str:
    """How ``run`` ended, for a note naming it: its failure, ``finished`` (megatron's end-of-training line),
    ``exited early: <flag>`` (megatron's early-exit line, :func:`exit_cause`), else ``no line says how it ended``."""
    if run.failure:
        return run.failure
    if run.finished:
        return "finished"
    if run.deliberate_exit is not None:
        return f"exited early: {exit_cause(run.args, run.deliberate_exit)}"
    return "no line says how it ended"


def earlier_start_note(log: RunLog, index: int, window: Window) -> str:
    """``; an earlier start ...`` naming the lines and iterations of :func:`earlier_whole_start`, so that the user can
    read it alone; '' when there is none."""
    earlier = earlier_whole_start(log, index, window)
    if earlier is None:
        return ""
    first, last = earlier.line_span
    return (f"; an earlier start of the program, lines {first}-{last} of the log, ran iterations "
            f"{earlier.start}-{earlier.last_iteration} ({_ended(earlier)}): the log's first {last} lines alone give "
            f"its numbers (head -n {last})")


def earlier_window_note(log: RunLog, window: Window) -> str:
    """A ``note:`` line for the ok row of ``log`` when an earlier start of the program in it also ran the whole window
    (:func:`earlier_whole_start`), e.g. one job's log appended twice by the same ``sbatch -o``: it names the log, the
    start whose numbers the row gives (the latest one with a line in the window: :func:`window_run`) and the earlier
    one, so that two runs' numbers are not taken for one's. '' when there is no such start."""
    index = _window_run_index(log, window)
    earlier = earlier_whole_start(log, index, window)
    if earlier is None:
        return ""
    used, (first, last) = log.runs[index], earlier.line_span
    return (f"note: {log.path} holds more than one run of the window {window}: its row gives the numbers of the "
            f"start of the program at lines {used.line_span[0]}-{used.line_span[1]} (iterations "
            f"{used.start}-{used.last_iteration}); an earlier start, lines {first}-{last}, ran iterations "
            f"{earlier.start}-{earlier.last_iteration} ({_ended(earlier)}): head -n {last} of the log gives its "
            "numbers")


def later_failure_note(log: RunLog, window: Window) -> str:
    """A ``note:`` line for the ok row of ``log`` when a start of the program after the one whose numbers it gives
    (:func:`window_run`) failed, e.g. a resubmission with other arguments appended to the same ``sbatch -o`` file that
    ran out of memory before the window: its lines hold no window iteration, so the row was a plain ``ok`` and the
    failure went unseen. It names the log, the start the row reads and each later failed start (its lines and how it
    failed); '' when there is none. A later start SLURM stopped from outside (:attr:`Run.stopped_from_outside`: a
    time limit, a preemption, ``scancel``, a requeue) did not fail and is left out: a requeued checkpointed job
    appends such starts to its log (``#SBATCH --open-mode=append``) as it goes, and they say nothing of the row."""
    index = _window_run_index(log, window)
    failed = [run for run in log.runs[index + 1:] if run.failure and not run.stopped_from_outside]
    if not failed:
        return ""
    used = log.runs[index]
    starts = "; ".join(f"lines {run.line_span[0]}-{run.line_span[1]}, {_failed_at(run)}" for run in failed)
    which = "a later start of the program failed" if len(failed) == 1 else "later starts of the program failed"
    return (f"note: {log.path}: its row gives the numbers of the start of the program at lines "
            f"{used.line_span[0]}-{used.line_span[1]} (iterations {used.start}-{used.last_iteration}); {which} "
            f"and give{'s' if len(failed) == 1 else ''} no numbers: {starts}")


def doubled_note(log: RunLog) -> str:
    """A ``note:`` line for ``log`` when the job's output was written into it twice (:attr:`RunLog.doubled`: each
    piece of output again right after itself, or the whole run twice), read once: without it, every repeated line
    read as a restart and the row as a window spanning several starts. '' when it was not."""
    if not log.doubled:
        return ""
    return (f"note: {log.path}: {log.doubled}, the job's output written into the log twice (a `tee` into the file "
            "`sbatch -o` also writes?): read once, as one copy of it")


def per_task_files_note(log: RunLog) -> str:
    """A ``note:`` line for ``log`` when rank 0's line of a start comes before that start's first iteration line
    though megatron prints it after that iteration (:attr:`Run.out_of_order`): per-task output files put one after
    the other, rank 0's (arguments, checkpoint loads and saves, how the run ended) before the last rank's (iteration
    lines). The row still reads its arguments and iteration lines, but not how the run ended (an early exit reads
    ``truncated``), nor which start loaded or saved which checkpoint, so its status may differ from that of the same
    run's combined log. '' when there is none."""
    line = next((run.out_of_order for run in log.runs if run.out_of_order is not None), None)
    if line is None:
        return ""
    return (f"note: {log.path}: line {line.line}, {line.what} (printed by rank 0), comes before iteration lines "
            "printed before it: per-task output files put one after the other? The row reads the log in file order, "
            "so its status may not say how the run ended or where it resumed; give the job's combined output (all "
            "tasks in one file, as sbatch -o writes it)")


def _failed_at(run: Run) -> str:
    """``out of memory at iteration 2``: how ``run`` (a failed start) failed and its last whole iteration line, or
    ``... before any iteration line``."""
    return f"{run.failure} at iteration {run.last_iteration}" if run.last_iteration else (
        f"{run.failure} before any iteration line")


def cut_line_note(run: Run, first: int, last: float = math.inf) -> str:
    """``the line of iteration N is cut: line L`` for ``run``'s last cut iteration line of iterations
    ``first..last`` (:attr:`Run.cut_lines`), '' when it has none."""
    cut = [iteration for iteration in run.cut_lines if first <= iteration <= last]
    return f"the line of iteration {max(cut)} is cut: line {run.cut_lines[max(cut)]}" if cut else ""


def no_line_status(run: Run, window: Window) -> str:
    """The status of a window the log has no whole iteration line in: one whose lines there are cut (another rank's
    output cut into them) names the last of those (:func:`cut_line_note`); else a run resumed from a checkpoint after
    the window printed none there (its lines average from :func:`first_averaged` on), else the log interval passes
    over the window (named with the interval the arguments block gives, so that the user can pick a window ending on
    a logged iteration)."""
    if cut := cut_line_note(run, window.first, window.last):
        return f"no whole iteration line in the window {window}: {cut}"
    if (start := first_averaged(run)) is not None and start > window.last:
        after_warm_up = _window_after_warm_up(run)
        advice = f"; e.g. --window {after_warm_up}, which leaves out the warm-up after the start" if after_warm_up else ""
        return (f"no iteration line in the window {window}: this start of the program begins at iteration "
                f"{start} (resumed from a checkpoint?); give a window within {start}-{run.last_iteration}{advice}")
    interval = run.args.get("log_interval")
    if is_positive_int(interval):
        first = "" if start != run.start else f"iterations {run.start or 1} and "
        return (f"no iteration line in the window {window}: the log interval is {interval}, so megatron printed "
                f"{first}multiples of {interval} only; end the window on one of them")
    return f"no iteration line in the window {window} (log interval larger than the window?)"


def _window_after_warm_up(run: Run) -> Window | None:
    """A window of ``run`` whose lines leave out the first two iterations after its start, as the default 3-10 does
    for a run from iteration 1: a resumed run's first steps also pay for compilation and allocation. With log
    interval 1 it spans eight iterations; with a longer interval, one whole interval after the line that averages
    the start. None when the run has no such window or its log interval cannot be read."""
    interval, start = run.args.get("log_interval"), first_averaged(run)
    if start is None or not is_positive_int(interval):
        return None
    if interval == 1:
        first = start + 2
        last = min(run.last_iteration, first + 7)
    else:
        first = (start // interval + 1) * interval + 1
        last = first - 1 + interval
    return Window(first, last) if first <= last <= run.last_iteration else None


def stopped_status(log: RunLog, run: Run, window: Window) -> str:
    """The status of ``run`` (of ``log``) whose lines stop before the window's end: ``exited ...`` naming the flag when
    megatron reports an early exit it was asked for (:attr:`Run.deliberate_exit`; the job did not die); ``ends at
    ...: still running, or killed without a message`` when the job may still be writing the log
    (:func:`may_still_run`); else ``truncated ...``."""
    total = run.train_iters if run.train_iters is not None else "?"
    exit_ = run.deliberate_exit
    if exit_ is None:
        cut = cut_line_note(run, run.last_iteration + 1)
        if not cut and may_still_run(log, run):
            return (f"ends at iteration {run.last_iteration}/{total}, before the window {window} ends: still running"
                    f"{_saving_note(run.saving)}, or killed without a message")
        return f"truncated at iteration {run.last_iteration}/{total}" + (f" ({cut})" if cut else "")
    cause = exit_cause(run.args, exit_)
    if exit_.iteration is None:
        return f"exited after iteration {run.last_iteration}/{total} ({cause})"
    if exit_.iteration != run.last_iteration:
        cause += f"; last line at iteration {run.last_iteration}"
    return f"exited at iteration {exit_.iteration}/{total} ({cause})"


QUIET_S = 600.0
"""How long (seconds) a running job's log may go unwritten at least: megatron's collectives time out after 10 minutes
by default (``--distributed-timeout-minutes``), and a slower log interval is allowed for (:func:`may_still_run`)."""

SAVE_QUIET_S = 3600.0
"""How long (seconds) after megatron began a checkpoint save a job whose log stops at that save may still be saving
(:func:`_still_saving`): a large model's checkpoint written to a parallel file system takes minutes to tens of
minutes, during which megatron prints nothing."""


def _saving_note(saving: CheckpointSave | None) -> str:
    """`` (saving the checkpoint of iteration N since <time>)`` for the save ``saving`` a run's log stops at, '' for
    none."""
    if saving is None:
        return ""
    since = f" since {saving.begun_at:%Y-%m-%d %H:%M:%S}" if saving.begun_at is not None else ""
    return f" (saving the checkpoint of iteration {saving.iteration}{since})"


def may_still_run(log: RunLog, run: Run) -> bool:
    """``run``, which shows no failure, stop or end, may still be running: it is the log's last start, and either the
    file was written within the quiet time (:data:`QUIET_S`, or three of its log intervals at the pace of its last
    line when that is longer: a job printing every 100th iteration writes its log seldom) and so was the run's last
    iteration line before that write (:func:`_written_with_last_line`), or its log stops at a checkpoint save that may
    still be going on (:func:`_still_saving`). A file written longer ago, a text without a file, a pipe or a
    compressed archive (:attr:`RunLog.written_at` None) is a job that ended: its lines stop because it was killed; so
    is a fresh copy (``cp``, ``scp``, ``sed``) of an older log, whose modification time is the copy's."""
    if log.written_at is None or run is not log.runs[-1]:
        return False
    last = log.iterations.get(run.last_iteration)
    if last is None:
        return False
    interval = run.args.get("log_interval")
    pace = last.elapsed_ms / 1000 * interval if is_positive_int(interval) else 0.0
    quiet = max(QUIET_S, 3 * pace) if math.isfinite(pace) else QUIET_S
    recent = time.time() - log.written_at <= quiet and _written_with_last_line(log.written_at, last, quiet)
    return recent or _still_saving(log.written_at, run.saving, quiet)


def _still_saving(written_at: float, saving: CheckpointSave | None, quiet: float) -> bool:
    """The checkpoint save ``saving`` that a run's log stops at (:attr:`Run.saving`) may still be going on: megatron
    began it at most :data:`SAVE_QUIET_S` (or the run's ``quiet`` time, when longer) ago by its line's timestamp, and
    the log file was written within ``quiet`` seconds of that line (the clocks of the node and of the file's server
    may differ a little), as the file of a job writing it is: a fresh copy (``cp``, ``sed``) of a log a job killed in
    its save left, written long after the line, reads as the kill. A save line without a timestamp (an older
    Megatron) gives no time to go by: its silence counts as any other (:func:`may_still_run`). The timestamp is local
    time without a zone, read as this machine's: a log read in another zone reads as a job that ended."""
    if saving is None or saving.begun_at is None:
        return False
    try:
        begun = saving.begun_at.timestamp()
    except (OverflowError, OSError, ValueError):  # a time this platform's clock cannot hold
        return False
    return abs(written_at - begun) <= quiet and time.time() - begun <= max(SAVE_QUIET_S, quiet)


def _written_with_last_line(written_at: float, last: IterationLine, quiet: float) -> bool:
    """The log file's modification time ``written_at`` is within ``quiet`` seconds of the timestamp of its last
    iteration line ``last``, as the file of a job still writing it is. megatron prints local time without a zone,
    read here as the local time of this machine: a log read where the clock's zone differs from the nodes' is hours
    off and reads as a job that ended, as does a line without a timestamp (an older Megatron)."""
    if last.printed_at is None:
        return False
    try:
        return abs(written_at - last.printed_at.timestamp()) <= quiet
    except (OverflowError, OSError, ValueError):  # a time this platform's clock cannot hold
        return False


def exit_cause(args: dict, exit_: DeliberateExit) -> str:
    """The flag (with its value from the arguments block) that made megatron exit early as ``exit_`` reports."""
    if exit_.kind == "duration":
        return _flag_with_value("--exit-duration-in-mins", args.get("exit_duration_in_mins"))
    if exit_.kind == "signal":
        return f"--exit-signal-handler: {_signal_name(args.get('exit_signal'))} received"
    if exit_.kind == "termination":
        return "SIGINT or SIGTERM received, --exit-signal-handler-for-training"
    interval, phases = args.get("exit_interval"), args.get("phase_transition_iterations")
    if isinstance(phases, list) and exit_.iteration in phases and not (
            is_positive_int(interval) and exit_.iteration % interval == 0):
        return "--phase-transition-iterations"
    return _flag_with_value("--exit-interval", interval)


def _flag_with_value(flag: str, value: object) -> str:
    """``--flag N`` when the arguments block gives a positive integer N, else the flag alone."""
    return f"{flag} {value}" if is_positive_int(value) else flag


def _signal_name(value: object) -> str:
    """The name of the ``exit_signal`` argument as printed (``15`` from Python >= 3.11, ``Signals.SIGTERM`` before);
    megatron's default SIGTERM when it cannot be read."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signal.Signals(value).name
        except ValueError:
            return "SIGTERM"
    if isinstance(value, str) and value.startswith("Signals."):
        return value.removeprefix("Signals.")
    return "SIGTERM"


def first_averaged(run: Run) -> int | None:
    """The first iteration ``run``'s lines average (None when it printed none): that of its first line, as megatron-core
    0.19.2 prints the first iteration a start trains (:func:`first_trained`); but that first trained iteration when the
    first line comes at the first multiple of ``log_interval`` after it: the log of a Megatron that prints every
    ``log_interval``-th iteration only (releases before the line of a start's first iteration), whose first line
    averages every iteration since the start as each later line averages the interval before it. That is iteration 1 for
    a fresh start whose first line is at ``log_interval`` > 1, and ``N`` + 1 for one resumed from a checkpoint of
    iteration ``N`` (megatron's ``successfully loaded checkpoint ... at iteration N``) whose first line is at the first
    multiple after ``N`` + 1. Read as starting at the first line, their windows were refused as missing the iterations
    before it or as averaging one iteration too many, and a window from the first line read the next line alone. A first
    line at the first trained iteration itself is read as 0.19.2's, timing that one iteration (its next line averages it
    again: its timer is not reset after the first line), also where that iteration is a multiple of ``log_interval``,
    e.g. a resume from a checkpoint of iteration ``log_interval`` - 1: read from 1, a window after it was taken for
    whole intervals and got the warm-up in its step time. An older Megatron resumed there prints the same first line but
    resets its timer after it, which its log does not show. 0.19.2's line at the next multiple averages from the first
    trained iteration too, so a start whose first line was lost is read alike."""
    interval, trained = run.args.get("log_interval"), first_trained(run)
    if run.start is None or not is_positive_int(interval) or run.start <= trained:
        return run.start
    return trained if run.start == (trained // interval + 1) * interval else run.start


def first_trained(run: Run) -> int:
    """The first iteration ``run`` trained: the one after the checkpoint it loaded (:attr:`Run.resumed_from`), 1 for
    a fresh start (no checkpoint, or a converted or ``--finetune`` one loaded as iteration 0)."""
    return run.resumed_from + 1 if run.resumed else 1


def window_lines(log: RunLog, window: Window) -> list[IterationLine]:
    """The log's iteration lines printed at iterations ``window.first..window.last`` that the window's numbers are
    read from, in order: all but a run's first line when the run's next line, also in the window, averages that
    first iteration again (:func:`interval_start`), as at ``--window 1-10`` with log interval 10 (lines at 1 and
    10: the line of 10 alone covers the window, once)."""
    lines = [line for i, line in sorted(log.iterations.items()) if window.first <= i <= window.last]
    return [line for k, line in enumerate(lines)
            if not _averaged_again(log, line, lines[k + 1] if k + 1 < len(lines) else None)]


def _averaged_again(log: RunLog, line: IterationLine, following: IterationLine | None) -> bool:
    """``line`` is its run's first line and ``following``, the run's next line, averages from that iteration on."""
    run = log.runs[line.run]
    interval, start = run.args.get("log_interval"), first_averaged(run)
    return (following is not None and following.run == line.run and line.iteration == start
            and is_positive_int(interval) and interval_start(following.iteration, start, interval) == start)


def interval_start(iteration: int, run_start: int, log_interval: int) -> int:
    """The first iteration that Megatron's line at ``iteration`` averages over, in a run whose first line is at
    ``run_start``: megatron prints that first iteration without resetting its interval timer, so its next line (at
    the next multiple of ``log_interval``) covers it too; every later line covers the ``log_interval`` before it."""
    if iteration <= (run_start // log_interval + 1) * log_interval:
        return run_start
    return iteration - log_interval + 1


def _coverage_problem(log: RunLog, window: Window, lines: Sequence[IterationLine]) -> str:
    """'' when ``lines`` come from one run and average every iteration of the window exactly once and nothing before
    it; else what is wrong."""
    runs = {line.run for line in lines}
    if len(runs) > 1:
        after_warm_up = _window_after_warm_up(log.runs[max(runs)])
        advice = (f"; e.g. --window {after_warm_up}, the last start's lines after its warm-up" if after_warm_up
                  else "")
        return (f"the window {window} spans a restart: its lines come from {len(runs)} starts of the program"
                f"{advice}")
    run = log.runs[lines[0].run]
    interval = run.args.get("log_interval")
    if not isinstance(interval, int) or interval < 1:
        return "arguments block lacks log_interval"
    run_start = first_averaged(run)
    expected = window.first
    for line in lines:
        start = interval_start(line.iteration, run_start, interval)
        if start < window.first:
            return (f"the line of iteration {line.iteration} averages iterations {start}-{line.iteration}, which "
                    f"begin before the window {window} (log interval {interval}); "
                    f"{_earlier_start_advice(run, start, line.iteration)}")
        if start < expected:
            return (f"the line of iteration {line.iteration} averages iterations {start}-{line.iteration}, which "
                    f"overlap the line of iteration {expected - 1} (megatron does not reset its timer there)")
        if start > expected:
            gap = f"iteration {expected}" if start - 1 == expected else f"iterations {expected}-{start - 1}"
            cause = (f"this start of the program begins at {run_start}" if start == run_start
                     else cut_line_note(run, expected, start - 1) or "missing or cut")
            return f"no line for {gap} of the window {window} ({cause})"
        expected = line.iteration + 1
    following = (lines[-1].iteration // interval + 1) * interval
    if following <= window.last:
        return (f"no line for iteration {following} of the window {window} "
                f"({cut_line_note(run, following, following) or 'missing or cut'})")
    if lines[-1].iteration < window.last and run.finished and lines[-1].iteration == run.last_iteration:
        return (f"iterations {lines[-1].iteration + 1}-{window.last} of the window {window} are in no log line (the run "
                f"ended between lines, log interval {interval}); end the window at {lines[-1].iteration}")
    if lines[-1].iteration < window.last:
        return (f"the window {window} ends between log lines: the last line in it averages up to iteration "
                f"{lines[-1].iteration}, the next one reaches {following} (log interval {interval}); end the window "
                "on a logged iteration")
    return ""


def _earlier_start_advice(run: Run, start: int, end: int) -> str:
    """How to read ``run`` when its line at ``end``, averaging iterations ``start..end``, begins before the window:
    start the window at ``start`` or after ``end``, unless that line averages the run's first two iterations, whose
    compilation and allocation the default window 3-10 leaves out. Then a window after them
    (:func:`_window_after_warm_up`) or a rerun with ``--log-interval 1``; a window of that line only when neither is
    at hand in this log, saying that it includes the warm-up."""
    run_start = first_averaged(run)
    if start >= run_start + 2:
        return f"start the window at {start}, or after {end}"
    after_warm_up = _window_after_warm_up(run)
    rerun = "rerun with --log-interval 1 for a line per iteration" if run.args.get("log_interval") != 1 else ""
    if after_warm_up is not None:
        return f"give --window {after_warm_up}, which leaves out the warm-up" + (f", or {rerun}" if rerun else "")
    warm_up = f"--window {start}-{end} includes the warm-up (iterations {run_start}-{run_start + 1})"
    return f"{rerun}; {warm_up}" if rerun else warm_up


def _value_problem(window: Window, lines: Sequence[IterationLine]) -> str:
    """'' when no line of the window counts a skipped step, every time is positive and finite, and Megatron's TFLOP/s
    is finite on every line or absent from all; else what is wrong."""
    for line in lines:
        if line.skipped_iterations or line.nan_iterations:
            return (f"skipped steps in the window {window}: the line of iteration {line.iteration} counts "
                    f"{line.skipped_iterations} skipped, {line.nan_iterations} NaN")
        if not 0 < line.elapsed_ms < math.inf:
            return f"elapsed time per iteration {line.elapsed_ms} ms at iteration {line.iteration}"
        if line.tflops_per_gpu is not None and not math.isfinite(line.tflops_per_gpu):
            return f"Megatron TFLOP/s/GPU {line.tflops_per_gpu} at iteration {line.iteration}"
    if len({line.tflops_per_gpu is None for line in lines}) > 1:
        return f"Megatron TFLOP/s/GPU is missing from some lines of the window {window}"
    return ""


def _consumed_before(log: RunLog, run: int, first: int) -> int | None:
    """Samples consumed before iteration ``first`` by start ``run`` of the program, from that run's own lines: its
    line at ``first - 1``, else, when the run starts at ``first``, its first line less that line's batch (the first
    line covers its one iteration only); None when neither is in the log."""
    previous = log.iterations.get(first - 1)
    if previous is not None and previous.run == run and previous.consumed_samples is not None:
        return previous.consumed_samples
    start = log.iterations.get(first)
    if (first == log.runs[run].start and start is not None and start.run == run
            and start.consumed_samples is not None and start.global_batch_size is not None):
        return start.consumed_samples - start.global_batch_size
    return None


def _batch_problem(log: RunLog, window: Window, lines: Sequence[IterationLine]) -> str:
    """'' when the global batch size is the same on every line and each line's interval consumed exactly that many
    samples per iteration; else what is wrong.

    A line prints the batch size of its last iteration only, so a batch that changed inside a line's interval (a
    ``--step-batch-size-schedule`` step between two lines of ``log_interval`` > 1) leaves the lines' batch sizes equal
    while the averaged time covers smaller batches. Megatron's running ``consumed samples`` shows it. An interval
    whose start no line shows is accepted unless the run has a batch-size schedule. ``lines`` must have passed
    :func:`_coverage_problem` (one run, a valid ``log_interval``)."""
    batches = sorted({line.global_batch_size for line in lines if line.global_batch_size is not None})
    if len(batches) > 1:
        return (f"global batch size changes in the window {window} ({', '.join(map(str, batches))}): batch-size "
                "ramp-up?")
    run = log.runs[lines[0].run]
    for line in lines:
        first = interval_start(line.iteration, first_averaged(run), run.args["log_interval"])
        if first == line.iteration or line.consumed_samples is None or line.global_batch_size is None:
            continue
        before = _consumed_before(log, line.run, first)
        if before is None:
            if run.args.get("step_batch_size_schedule") is not None:
                return (f"the line of iteration {line.iteration} averages iterations {first}-{line.iteration} of a "
                        f"batch-size schedule, and no line shows the samples consumed before iteration {first}: "
                        "its batch size may have changed inside")
            continue
        iterations = line.iteration - first + 1
        if line.consumed_samples - before != iterations * line.global_batch_size:
            return (f"global batch size changes inside the line of iteration {line.iteration}: iterations "
                    f"{first}-{line.iteration} consumed {line.consumed_samples - before} samples, not "
                    f"{iterations} x {line.global_batch_size} (batch-size schedule?)")
    return ""


def line_iterations(window: Window, lines: Sequence[IterationLine]) -> tuple[int, ...]:
    """How many of the window's iterations each of ``lines`` averages, each count once, ascending (see
    :func:`per_iteration`; ``lines`` must tile the window)."""
    ends = [window.first - 1, *(line.iteration for line in lines)]
    return tuple(sorted({end - before for before, end in zip(ends[:-1], ends[1:], strict=True)}))


def per_iteration(window: Window, lines: Sequence[IterationLine], values: Sequence[float]) -> list[float]:
    """``values`` (one per line of ``lines``) repeated once for each iteration of the window its line averages, so
    that the median or mean is one over the window's iterations, not its lines: a run's first averaged line can cover
    more or fewer iterations than the log interval (e.g. 1-2 at log interval 1). ``lines`` must have passed
    :func:`_coverage_problem` (they tile the window)."""
    ends = [window.first - 1, *(line.iteration for line in lines)]
    return [value for value, before, end in zip(values, ends[:-1], ends[1:], strict=True)
            for _ in range(end - before)]
