"""Parse a Megatron-LM stdout log: the printed arguments block, the per-iteration lines, and how the run ended.

The formats are megatron-core 0.19.2's: ``_print_args`` writes ``------------------------ arguments
------------------------`` then one ``  name ........ value`` line per argument (dots pad the name to 48 characters)
and ``-------------------- end of arguments ---------------------``; ``training_log`` writes
`` [date] iteration       10/      10 | consumed samples: ... | elapsed time per iteration (ms): 75213.4 |
throughput per GPU (TFLOP/s/GPU): 133.2 | ... | global batch size:  4096 | ... | number of skipped iterations:   0 |
number of nan iterations:   0 |``. Lines may carry a launcher prefix (``0: `` from ``srun --label``, ``[rank0]:`` from
torchrun); matching is by search, not from the line start. An iteration line is read only when it is whole: every
field read ends with Megatron's `` |`` and the line's last field (``number of nan iterations``) is there, so a line
cut by a crash or by another rank's output is left out rather than read as a shorter number.
Each start of the program is a *run*: a new arguments block, an iteration number that does not increase (a restart, a
resume or a requeued job appending to the same log) or megatron's checkpoint load line after iteration lines (a
start loads before it trains, so that line begins the next start, one resumed where the last one stopped) starts the
next one; output written into the log twice (each piece of output again right after itself, as a ``tee -a`` into the
file ``sbatch -o`` writes leaves it, or the whole run twice) is read once (:func:`doubled_lines`), not as a restart
at each copy. Each run keeps its own arguments (a run without a block of its own has the previous run's) and its own
part of the log: a run is *failed* when its part shows an out-of-memory error (of a GPU, or the host's OOM killer),
an NCCL timeout, megatron's rerun state machine exiting on a result its check rejected (a NaN or Inf gradient:
``Unexpected result nan ...`` then ``Exiting now``), a
Python traceback (not one of an exception Python ignored or a thread other than the main one raised: the program went on after those; torchrun's own
only when nothing else shows why the job ended), a C++ abort, a fatal Python error, a segmentation fault, an NCCL
error, a step SLURM ended (cancelled, a node failure included, an uncorrectable memory error, a failed job, its memory
limit; a cancellation without a reason that follows a task's failure is that failure: ``--kill-on-bad-exit``) or a
task that srun reports failed, unless training is seen to go on after it: two iteration lines of the run
follow it, or one and then megatron's ``[after training is done]`` or early-exit line (a handled traceback, e.g. of
W&B, a ``logging.exception`` or a retried read, is no failure; one in the final checkpoint save, after the last
iteration line, is). slurmstepd's first line ending the step (any cancellation, a time limit, ``scancel`` or a node
failure, an uncorrectable memory error, a failed job) outranks the crash and NCCL markers printed after it, its
consequences; a traceback begun before that line counts with its exception line, which may come after it (slurmstepd
writes from a process of its own). Likewise a rank's failure printed before an NCCL watchdog's timeout outranks it:
the other ranks' watchdogs time out on the collective the failed rank never joined (a traceback whose exception is
the timeout itself is none). Lines end at ``\\n`` only, as ``wc -l`` counts them (:func:`log_lines`). A run is
*finished* when megatron's ``[after training is done]`` line follows its last iteration line;
:attr:`Run.failure_after` is its last whole iteration line before its failure's first marker.
A run that stopped early on purpose records how (:class:`DeliberateExit`): megatron's
``[exiting program at iteration N]`` (``--exit-interval`` or ``--phase-transition-iterations``), ``[exiting
program after X minutes]`` or ``Exiting during evaluation, timelimit reached`` (``--exit-duration-in-mins``),
``[exiting program after receiving SIGTERM.]`` (``--exit-signal-handler``) and ``Termination requested. Performing
orderly shutdown.`` (``--exit-signal-handler-for-training``); such a run ends with ``sys.exit`` and prints no
``[after training is done]`` line. The vocabulary a run built comes from the tokenizer's `` > padded vocab (size: N)
with K dummy tokens (new size: M)`` line (the arguments block is printed before the tokenizer is built, so it has no
``vocab_size`` unless ``--vocab-size`` was given). A run records the first of rank 0's lines before its first
iteration line that megatron prints only after that iteration (:attr:`Run.out_of_order`): per-task output files put
one after the other.
"""

from __future__ import annotations

import ast
import bisect
import bz2
import gzip
import importlib
import io
import lzma
import math
import os
import re
import signal
import stat
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from megatron.oellm.training.throughput import LoggedPeak, parse_basis

_ARGS_START = re.compile(r"-{3,} arguments -{3,}")
_ARGS_END = re.compile(r"-{3,} end of arguments -{3,}")
_ARG_LINE = re.compile(r"(?:^|\s)(?P<name>[A-Za-z_]\w*) (?P<dots>\.*) (?P<value>.*)$")
_ITERATION = re.compile(r"\biteration\s+(?P<iteration>\d+)/\s*(?P<total>\d+) \|")
_NUMBER = r"-?(?:\d+(?:\.\d+)?|nan|inf)"
"""A float as Megatron's ``{:.1f}`` prints it, ``nan`` and ``inf`` included."""
_ELAPSED = re.compile(rf"elapsed time per iteration \(ms\): (?P<ms>{_NUMBER}) \|")
_TFLOPS = re.compile(rf"throughput per GPU \(TFLOP/s/GPU\): (?P<tflops>{_NUMBER}) \|")
_BATCH = re.compile(r"global batch size:\s*(?P<gbs>\d+) \|")
_CONSUMED = re.compile(r"consumed samples:\s*(?P<samples>\d+) \|")
_SKIPPED = re.compile(r"number of skipped iterations:\s*(?P<count>\d+) \|")
_NAN = re.compile(r"number of nan iterations:\s*(?P<count>\d+) \|")
_PADDED_VOCAB = re.compile(r"> padded vocab \(size: (?P<size>\d+)\) with \d+ dummy tokens \(new size: (?P<padded>\d+)\)")
_TRAINING_DONE = re.compile(r"\[after training is done\] datetime:")
_LOADED_CHECKPOINT = re.compile(r"successfully loaded checkpoint from .* at iteration (?P<iteration>\d+)")
"""megatron's line after it loaded a checkpoint (``load_checkpoint``; 0.19.2 prints ``[ t 1/1, gtp_remat 1/1, p 1/4 ]``
in between, older releases ``[ t 1/1, p 1/4 ]``). megatron loads while it sets the model up (``pretrain`` calls
``setup_model_and_optimizer`` before ``train``), so the line comes before a start's first iteration line: one after
a start's iteration lines is the next start's, whose arguments block the log lacks."""
_SAVING = re.compile(r"(?:\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{6})?)\] )?saving checkpoint at "
                     r"iteration\s+(?P<iteration>\d+) to ")
"""megatron's line as a checkpoint save begins (``save_checkpoint``; 0.19.2 stamps it ``[%Y-%m-%d %H:%M:%S.%f]``,
older releases do not)."""
_SAVED = re.compile(r"successfully saved (?:local )?checkpoint (?:from|at) iteration\s+\d+")
"""megatron's line once a checkpoint save ended (0.19.2: ``from iteration``, ``local checkpoint from iteration`` for
a non-persistent local one; older releases ``at iteration``)."""
_STAMP = re.compile(r"\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{6})?)\]\s*$")
"""The timestamp that ends the text before an iteration line's ``iteration i/n |`` head: megatron-core 0.19.2's
``datetime.now()`` in ``%Y-%m-%d %H:%M:%S.%f`` (older releases print whole seconds, the oldest none), local time
without a zone."""
_EXITS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"\[exiting program at iteration (?P<iteration>\d+)\] datetime:"), "iteration"),
    (re.compile(r"\[exiting program after \S+ minutes\] datetime:"), "duration"),
    (re.compile(r"Exiting during evaluation, timelimit reached"), "duration"),
    (re.compile(r"\[exiting program after receiving SIGTERM\.\] datetime:"), "signal"),
    (re.compile(r"Termination requested\. Performing orderly shutdown\."), "termination"),
)
"""megatron-core 0.19.2's messages of a deliberate early exit (``checkpoint_and_decide_exit``, ``evaluate`` and the
``--exit-signal-handler-for-training`` handler), each with its :attr:`DeliberateExit.kind`."""
_EXCEPTION = re.compile(r"^(?:.*?: ?)??(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)|"
                        r"(?:[A-Za-z_]\w*\.)+[A-Z]\w*?[a-z]\w*)(?:: ?(?P<message>.*))?$")
"""An exception line of a traceback: ``Name: message``, or the bare ``Name`` Python prints for one without a message
(a bare ``assert``, ``KeyboardInterrupt``), after a launcher prefix or none (none tried first: the name at the
line's start is the exception's, a name in its message is not). A name that does not end in ``Error``,
``Exception`` or ``Interrupt`` counts with its module only, a class name after it (``module.CamelCase``): triton's
``triton.runtime.errors.OutOfResources``, ``torch._dynamo.exc.BackendCompilerFailed``; a bare word followed by a
colon (``WARNING: ...``) or an enum member (``AttnBackend.FLASH``) is no exception."""

_TRACEBACK = "Traceback (most recent call last)"
_TRACEBACK_MARKER = re.compile(re.escape(_TRACEBACK))
_IGNORED_HEADER = re.compile(r"Exception ignored|Exception in thread ")
"""Python's report of an exception it went on after begins with one of these lines, then the traceback: one it ignored
(a ``__del__`` or atexit callback, e.g. the DataLoader's ``AssertionError: can only test a child process`` at
shutdown), or one that ended a thread other than the main one (``threading.excepthook``, e.g. W&B's network-status
thread losing its connection), which the program outlives."""

_REPORT_HEADING = re.compile(r"Traceback \(most recent call last\)|During handling of the above exception|"
                             r"The above exception was the direct cause")
"""A line of Python's exception report that heads a traceback (of a chained exception too)."""

_LAUNCHER_EXCEPTION = re.compile(r"torch\.distributed\.elastic\.[\w.]*\.(?:ChildFailedError|SignalException)\b|"
                                 r"RuntimeError: DataLoader worker \(pid \d+\) is killed by signal: Terminated")
"""Exceptions that end a traceback after the job went wrong elsewhere: torchrun's own, ``ChildFailedError`` when a
rank it started failed (that rank's output says why), ``SignalException`` when a signal reached it (SLURM ending the
step at its time limit, srun ending the other tasks after one failed); and a rank's ``DataLoader worker ... is
killed by signal: Terminated``, the same SIGTERM reaching its data-loader workers first."""

FailureStatus = Callable[[re.Match, str], str]
"""(the marker's match, the run's text) -> the row's status ('': no failure by this marker, read the next one)."""


def _fixed(status: str) -> FailureStatus:
    """A :data:`FailureStatus` that is always ``status``."""
    return lambda match, text: status


def _crash_status(match: re.Match, text: str) -> str:
    """``crashed (Name: message)`` of the last exception after a Python traceback (``crashed`` if none is shown)."""
    exception = last_exception(text)
    return f"crashed ({exception})" if exception else "crashed"


def _program_crash_status(match: re.Match, text: str) -> str:
    """:func:`_crash_status` of the last traceback that does not follow from the job ending elsewhere
    (:data:`_LAUNCHER_EXCEPTION`); '' when every traceback does, so that the later markers say why the job ended
    (SLURM's cancellation, srun's report), and only failing those the last one of :data:`FAILURE_MARKERS`, such a
    traceback itself."""
    at = len(text)
    while (at := text.rfind(_TRACEBACK, 0, at)) >= 0:
        exception = exception_after(text, at)
        if not _LAUNCHER_EXCEPTION.match(exception):
            return f"crashed ({exception})" if exception else "crashed"
    return ""


_REJECTED_RESULT = re.compile(r"Unexpected result (?P<result>[^\s(]+) (?:on rank \d+ at iteration #\d+ invocation #\d+ )?"
                              r"\(message='(?P<message>[^'\n]*)'")
"""megatron-core's rerun state machine reporting a result its check rejected (a NaN or Inf gradient or loss)."""


def _rejected_result_status(match: re.Match, text: str) -> str:
    """``stopped by megatron's result validation (nan: found NaN in ...)`` from the last rejected result before
    megatron's rerun state machine exits (it ends the job with ``sys.exit``: no traceback, no other marker)."""
    rejected = list(_REJECTED_RESULT.finditer(text, 0, match.start()))
    if not rejected:
        return "stopped by megatron's result validation"
    reason = f"{rejected[-1]['result']}: {rejected[-1]['message']}"
    return f"stopped by megatron's result validation ({reason if len(reason) <= 60 else reason[:57] + '...'})"


_SRUN_TASK_FAILED = re.compile(r"srun: error: [^\n]*?(?P<tasks>tasks? [\d,-]+): (?P<how>Exited with exit code "
                               r"[1-9]\d*|Aborted|Killed|Segmentation fault|Bus error|Out Of Memory)")
"""srun's report of a task that failed: a non-zero exit code, or the signal or OOM kill that ended it."""

_SRUN_TERMINATING = re.compile(r"srun: Terminating (?P<step>StepId=\S+)")
"""srun ending the step because a task failed (``--kill-on-bad-exit``)."""

_TORCHRUN_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(?:\n[^\n]*){0,4}?\n[^\n]*\brank\s*: "
                                  r"(?P<rank>\d+)[^\n]*\n[^\n]*\bexitcode\s*: (?P<code>-?[1-9]\d*)\b")
"""The rank and non-zero exit code (negative: the signal that ended it) of torchrun's ``ChildFailedError`` report."""


def _failed_task(match: re.Match) -> str:
    """``task 3 exited with exit code 1`` from srun's report of a failed task (:data:`_SRUN_TASK_FAILED`)."""
    return f"{match['tasks']} {match['how'].lower()}"


def _srun_task_status(match: re.Match, text: str) -> str:
    """``task 3 exited with exit code 1 (srun)``: the status of srun's report of a failed task."""
    return f"{_failed_task(match)} (srun)"


def _torchrun_root_cause(text: str) -> str:
    """``torchrun: rank 6 exitcode -7, SIGBUS`` from torchrun's first report of a failed rank in ``text`` (a negative
    exit code is the signal that ended the rank), '' if none."""
    if (found := _TORCHRUN_ROOT_CAUSE.search(text)) is None:
        return ""
    code = int(found["code"])
    named = code < 0 and -code in signal.valid_signals()
    return f"torchrun: rank {found['rank']} exitcode {code}" + (f", {signal.Signals(-code).name}" if named else "")


def task_failure(text: str) -> str:
    """How a task failed in ``text`` (the part of a run's log before slurmstepd's cancellation of its step), ''
    when nothing shows one: srun's report of the failed task (:func:`_srun_task_status`), torchrun's report of the
    rank that failed, or srun terminating the step. Under ``srun --kill-on-bad-exit=1`` a task's failure makes
    srun end the step, which slurmstepd reports as ``*** STEP ... CANCELLED AT ... ***`` without a reason, as it
    does a ``scancel``: what comes before that line tells the two apart."""
    srun, torchrun = _SRUN_TASK_FAILED.search(text), _torchrun_root_cause(text)
    if srun is not None:
        return f"{_failed_task(srun)} (srun; {torchrun})" if torchrun else _srun_task_status(srun, text)
    if torchrun:
        return f"task failed ({torchrun})"
    if terminating := _SRUN_TERMINATING.search(text):
        return f"task failed (srun: Terminating {terminating['step']})"
    return ""


def _cancel_status(match: re.Match, text: str) -> str:
    """``cancelled (time limit)`` from SLURM's ``*** JOB ... CANCELLED AT ... DUE TO TIME LIMIT ***``; a
    cancellation without a reason that follows a task's failure is that failure (:func:`task_failure`)."""
    if match["reason"]:
        return _cancelled(match["reason"])
    return task_failure(text[:match.start()]) or _cancelled(None)


def _cancelled(reason: str | None) -> str:
    """``cancelled (time limit)`` for slurmstepd's reason ``TIME LIMIT``; ``cancelled`` for none (``scancel``)."""
    return f"cancelled ({reason.lower()})" if reason else "cancelled"


_CANCELLED = re.compile(r"\bCANCELLED (?:AT \S+ )?(?:DUE TO (?P<reason>[A-Z][A-Z ]*?)(?:, [^*\n]*)? )?\*\*\*")
"""slurmstepd's ``*** JOB|STEP ... CANCELLED AT ... [DUE TO REASON[, ...]] ***``."""

SLURM_STOPS: tuple[tuple[re.Pattern, FailureStatus], ...] = (
    (_CANCELLED, _cancel_status),
    (re.compile(r"\bUNCORRECTABLE MEMORY ERROR AT \S+ \*\*\*"), _fixed("cancelled (uncorrectable memory error)")),
    (re.compile(r"\bFAILED \(non-zero exit code or other failure mode\) \*\*\*"),
     _fixed("failed (SLURM: non-zero exit code or other failure mode)")),
)
"""slurmstepd's lines of a step it ends (any cancellation, an uncorrectable memory error, a failed job), each with
the row status it gives: what ranks print after such a line is its consequence (see :func:`slurm_stop`)."""

OUTSIDE_STOPS = frozenset(_cancelled(reason) for reason in (None, "TIME LIMIT", "PREEMPTION", "JOB REQUEUE"))
"""Failure statuses of a job SLURM ended for no fault of the run (``scancel``, its time limit, a preemption or a
requeue): the iterations before the stop are as valid as those of a run that went on. A node failure, a memory
error or limit and SLURM's failed job are faults of the run's hardware or of the run."""

_NCCL_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|NCCL timeout|NCCL communicator was aborted")
"""A rank's NCCL watchdog finding a collective timed out or its communicator aborted: what the other ranks print
when one rank died (its collective never came), so the failure printed before it, if any, is the cause."""


def _nccl_timeout_status(match: re.Match, text: str) -> str:
    """``NCCL timeout``, unless a failure of :data:`_CAUSES` is shown before the watchdog's first line: that failure's
    status. In a multi-node job one rank raises (a traceback, a C++ abort, a segmentation fault, srun's report of its
    task) and the others' watchdogs time out ten minutes later: the row named the timeout and hid the error. A
    traceback begun before the watchdog's line counts with its exception line printed after it (the ranks' output
    interleaves): :func:`_before_stop`; one whose exception is the timeout itself does not (``torch.distributed.
    DistBackendError: [Rank 5] Watchdog caught collective operation timeout``, ``RuntimeError: NCCL communicator was
    aborted``: the timeout reaching Python, not a failure it followed). ``text`` is read as :func:`detect_failure`
    reads a run's part of the log, so a traceback it takes for no failure (training went on after it, an exception
    Python ignored or a thread's) is none here either."""
    earlier = _before_stop(text, text.rfind("\n", 0, match.start()) + 1, no_crash=_NCCL_TIMEOUT)
    return first_failure(earlier, _CAUSES) or "NCCL timeout"


FAILURE_MARKERS: tuple[tuple[re.Pattern, FailureStatus], ...] = (
    (re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"), _fixed("out of memory")),
    (re.compile(r"Detected \d+ oom[-_]kill event"), _fixed("host out of memory (OOM killer)")),
    (re.compile(r"exceeded (?:virtual )?memory limit \(\d+ > \d+\), being killed"),
     _fixed("host out of memory (SLURM memory limit)")),
    (_NCCL_TIMEOUT, _nccl_timeout_status),
    (re.compile(r"Saving a checkpoint and exiting now\. Please resume the job|Exiting now\. (?:The job can be resumed "
                r"from a previous checkpoint|A checkpoint at the last iteration already exists|Please resume the job)"),
     _rejected_result_status),
    (_TRACEBACK_MARKER, _program_crash_status),
    (re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'"),
     lambda match, text: f"crashed (C++ exception {match['type']})"),
    (re.compile(r"terminate called (?:after throwing|without an active exception)"),
     _fixed("crashed (C++ exception)")),
    (re.compile(r"Fatal Python error: (?P<message>[^\n]*)"),
     lambda match, text: f"crashed (Fatal Python error: {match['message'].strip()})"),
    (re.compile(r"Segmentation fault"), _fixed("crashed (segmentation fault)")),
    (re.compile(r"NCCL error"), _fixed("NCCL error")),
    *SLURM_STOPS,
    (_SRUN_TASK_FAILED, _srun_task_status),
    (_TRACEBACK_MARKER, _crash_status),
)
"""Log patterns that show a run failed, in priority order (an OOM also prints a traceback; a C++ abort also makes
Python and srun report; a rank the kernel's OOM killer ended, reported by slurmstepd's ``Detected N oom_kill
event`` and srun's ``task N: Out Of Memory``, prints nothing itself while the other ranks time out in NCCL), each
with the row status it gives. slurmstepd reports a step it ends as ``*** STEP|JOB ... CANCELLED AT ... [DUE TO
TIME LIMIT|PREEMPTION|JOB REQUEUE|NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS] ***``, ``... UNCORRECTABLE MEMORY
ERROR AT ... ***`` or ``... FAILED (non-zero exit code or other failure mode) ***``, and one its accounting kills
for memory as ``... exceeded [virtual ]memory limit (N > M), being killed`` (its ``Exceeded step memory limit at
some point`` kills nothing). torchrun's own traceback and a data-loader worker's SIGTERM (:data:`_LAUNCHER_EXCEPTION`),
printed whenever the job ends badly, name no cause: they count last, when nothing else in the log does. The
first of slurmstepd's lines ending the step (:data:`SLURM_STOPS`) outranks the markers printed after it."""

_STOP_RANK = FAILURE_MARKERS.index(SLURM_STOPS[0])
"""The place of slurmstepd's stop lines in :data:`FAILURE_MARKERS`: the markers before them outrank them when they
are printed before the step's first stop line."""

_CAUSES = (*FAILURE_MARKERS[FAILURE_MARKERS.index((_NCCL_TIMEOUT, _nccl_timeout_status)) + 1:_STOP_RANK],
           (_SRUN_TASK_FAILED, _srun_task_status))
"""The markers below the NCCL timeout in :data:`FAILURE_MARKERS` that name a failure of their own (megatron's
result check, a program's traceback, a C++ abort, a fatal Python error, a segmentation fault, an NCCL error, a
task srun reports failed; not SLURM's stop lines nor torchrun's own traceback): printed before a watchdog's line,
such a failure is what the watchdog timed out on (:func:`_nccl_timeout_status`)."""

_WITHOUT_STOPS = FAILURE_MARKERS[:_STOP_RANK] + FAILURE_MARKERS[_STOP_RANK + len(SLURM_STOPS):]
""":data:`FAILURE_MARKERS` less slurmstepd's stop lines: what a run's text is searched for once :func:`slurm_stop`
found none of them there."""


@dataclass(frozen=True)
class IterationLine:
    """The numbers of one ``training_log`` line."""

    iteration: int
    train_iters: int
    elapsed_ms: float
    """Mean time per iteration over the log interval, milliseconds."""
    tflops_per_gpu: float | None
    """Megatron's own TFLOP/s/GPU (``--log-throughput``), None if not logged."""
    global_batch_size: int | None
    skipped_iterations: int = 0
    """Iterations of the interval whose optimizer step was skipped (inf/NaN gradients)."""
    nan_iterations: int = 0
    """Skipped iterations of the interval whose loss was NaN or inf."""
    run: int = 0
    """The start of the program that printed the line (an index into :attr:`RunLog.runs`)."""
    consumed_samples: int | None = None
    """Samples consumed by the end of the line's iteration (megatron's running count), None if not logged: its
    change between two lines shows the batches of the iterations between them, which the line's own global batch
    size (that of its last iteration only) does not."""
    printed_at: datetime | None = None
    """When megatron printed the line: its timestamp (:data:`_STAMP`), a naive local time as the node's clock gave
    it; None when the line has none."""


@dataclass(frozen=True)
class DeliberateExit:
    """How a run stopped early on purpose, from megatron's own message (see :data:`_EXITS`)."""

    kind: str
    """``iteration`` (``--exit-interval`` / ``--phase-transition-iterations``), ``duration``
    (``--exit-duration-in-mins``), ``signal`` (``--exit-signal-handler``) or ``termination``
    (``--exit-signal-handler-for-training``)."""
    iteration: int | None = None
    """The iteration megatron exited at, when its message names it (``iteration`` only)."""


@dataclass(frozen=True)
class CheckpointSave:
    """A checkpoint save megatron reported begun (:data:`_SAVING`) and not yet ended (no :data:`_SAVED` line after
    it)."""

    iteration: int
    """The iteration whose checkpoint is being saved."""
    begun_at: datetime | None
    """When megatron began the save: its line's timestamp (a naive local time, as :attr:`IterationLine.printed_at`);
    None when the line has none (an older Megatron) or it names no valid time."""


@dataclass(frozen=True)
class RankZeroLine:
    """A line megatron prints on rank 0 only that places the iteration lines (printed on the last rank) before or
    after it: its end-of-training or early-exit line, a checkpoint save or load."""

    line: int
    """Its line number in the file (1-based)."""
    what: str
    """What it reports, for a note (``megatron's end-of-training line``, ``the checkpoint save of iteration 20``)."""
    first_after: float
    """The first iteration whose line can follow it in the same start: a line of an earlier iteration after it was
    printed before it (``inf`` for a line printed once training has ended)."""


@dataclass(frozen=True)
class Run:
    """One start of the program in a log: its arguments, the iterations it printed and how it ended."""

    args: dict[str, Any] = field(default_factory=dict)
    """The printed arguments, values read as Python literals where they are (else the printed string); a run that
    printed no arguments block (a restart appending to the log) has the previous run's."""
    args_complete: bool = False
    """The arguments block ended: its end line was seen, or an iteration line followed it (an end line lost, e.g.
    garbled by another rank's output; arguments lost with it read as missing). False: no block, or the log stops
    inside it."""
    start: int | None = None
    """The first iteration the run printed a line for, cut lines included (None: it printed none)."""
    last_iteration: int = 0
    """The last iteration the run printed a whole line for (0 if none)."""
    logged_train_iters: int | None = None
    """The largest iteration total (``iteration i/n``) of the run's lines (None if it printed none)."""
    failure: str = ""
    """How the run failed (see :data:`FAILURE_MARKERS`), from its own part of the log after the last point training
    is seen to go on from (see the module docstring); empty when none is shown."""
    finished: bool = False
    """Megatron's ``[after training is done]`` line follows the run's last iteration line: the run reached its end,
    so iterations past the last line were run but not logged (``train_iters`` not a multiple of ``log_interval``)."""
    vocabulary: tuple[int, int] | None = None
    """(tokenizer vocabulary, padded vocabulary) of megatron's ``padded vocab`` line; None when the run printed none
    (a restart without one keeps the previous run's)."""
    deliberate_exit: DeliberateExit | None = None
    """The early exit megatron reports after the run's last iteration line, one it was asked for by a flag (None: no
    such message; a later iteration line of the same run clears it)."""
    line_span: tuple[int, int] = (1, 0)
    """The first and last line number (1-based, in the file) of the run's part of the log."""
    failure_after: int = 0
    """The last iteration whose whole line the run printed before the first of :data:`FAILURE_MARKERS` that counts
    towards its :attr:`failure` (0: no failure, or none before it): iterations up to it completed before anything
    went wrong, e.g. a run whose NCCL watchdog times out at teardown after ``[after training is done]``."""
    cut_lines: dict[int, int] = field(default_factory=dict)
    """Iteration -> the line number of the run's last cut line of that iteration (see :func:`_parse_iteration`)."""
    resumed_from: int | None = None
    """The iteration of the checkpoint the run loaded before its first iteration line, from megatron's
    ``successfully loaded checkpoint ... at iteration N`` (:data:`_LOADED_CHECKPOINT`); None when it printed none."""
    logged_peak: LoggedPeak | None = None
    """The MFU peak of the run's ``[oellm] throughput basis`` line (:func:`~megatron.oellm.training.throughput.
    parse_basis`), which its ``[oellm]`` lines' MFU is against; None when it printed none (an older megatron-oellm,
    plain megatron; a restart in the same process keeps the previous run's)."""

    saving: CheckpointSave | None = None
    """The checkpoint save the run began after its last iteration line and has not reported ended: a run whose log
    stops there is writing its checkpoint (a long, silent time for a large model) or was killed during the save."""
    out_of_order: RankZeroLine | None = None
    """The first of rank 0's lines before the run's first iteration line that megatron prints only after that
    iteration (:func:`_out_of_order`): per-task output files put one after the other, rank 0's first. None in a log
    whose output is in the order it was printed."""

    @property
    def resumed(self) -> bool:
        """The run went on from a checkpoint of a trained iteration (:attr:`resumed_from` >= 1; a converted or
        ``--finetune`` checkpoint loads as iteration 0 and training starts at 1)."""
        return self.resumed_from is not None and self.resumed_from >= 1

    @property
    def stopped_from_outside(self) -> bool:
        """The run's :attr:`failure` is SLURM ending the job without a fault of the run (:data:`OUTSIDE_STOPS`)."""
        return self.failure in OUTSIDE_STOPS

    @property
    def train_iters(self) -> int | None:
        """Iterations the run was asked for (from its arguments or its iteration lines)."""
        if isinstance(self.args.get("train_iters"), int):
            return self.args["train_iters"]
        return self.logged_train_iters


@dataclass(frozen=True)
class RunLog:
    """One parsed Megatron log."""

    path: str
    iterations: dict[int, IterationLine] = field(default_factory=dict)
    """Iteration -> its line (the last one printed wins, e.g. after a restart in the same log)."""
    runs: tuple[Run, ...] = (Run(),)
    """Each start of the program, in log order (one empty run for a log with neither arguments nor iterations)."""
    doubled: str = ""
    """How the job's output was found written into the log twice, which the parse read once (:func:`doubled_lines`);
    '' when it was not."""
    written_at: float | None = None
    """When the log file was last written (its modification time, seconds since the epoch); None for a text parsed
    without a file, a pipe or a compressed archive: no job is still writing those."""


def parse_value(text: str) -> Any:
    """A printed argument value as the Python value it was (``4096``, ``True``, ``None``, lists), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


@dataclass
class _RunText:
    """A run while its part of the log is read."""

    args: dict[str, Any] = field(default_factory=dict)
    args_complete: bool = False
    own_block: bool = False
    """The run printed its own arguments block."""
    start: int | None = None
    previous: int = 0
    """The iteration of the last (possibly cut) iteration line read."""
    last_iteration: int = 0
    logged_train_iters: int | None = None
    """The largest iteration total of the run's whole lines so far."""
    finished: bool = False
    vocabulary: tuple[int, int] | None = None
    deliberate_exit: DeliberateExit | None = None
    lines: list[str] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    """Indices into :attr:`lines` of the run's iteration lines, cut ones included."""
    whole: list[tuple[int, int]] = field(default_factory=list)
    """(index into :attr:`lines`, iteration) of the run's whole iteration lines, in log order."""
    first_line: int = 1
    """The line number (1-based) in the file of :attr:`lines`' first line."""
    last_line: int = 0
    """The line number in the file of the run's last line, a second copy of a doubled log's line included (those are
    not in :attr:`lines`)."""
    cut_lines: dict[int, int] = field(default_factory=dict)
    """:attr:`Run.cut_lines` so far."""
    resumed_from: int | None = None
    logged_peak: LoggedPeak | None = None
    saving: CheckpointSave | None = None
    rank_zero: list[RankZeroLine] = field(default_factory=list)
    """Rank 0's lines read before the run's first iteration line (:class:`RankZeroLine`)."""
    out_of_order: RankZeroLine | None = None

    def inheritor(self, first_line: int) -> _RunText:
        """The next run, started at line ``first_line`` without an arguments block of its own: it keeps this run's
        arguments, vocabulary and throughput basis (printed once per process)."""
        return _RunText(dict(self.args), self.args_complete, vocabulary=self.vocabulary, first_line=first_line,
                        logged_peak=self.logged_peak)

    def frozen(self) -> Run:
        """The finished :class:`Run`, its failure read from its own lines only, after the last point training is
        seen to go on from (:meth:`live_from`)."""
        live_from = self.live_from()
        failure = detect_failure(self.lines, live_from)
        return Run(self.args, self.args_complete, self.start, self.last_iteration, self.logged_train_iters,
                   failure, self.finished, self.vocabulary,
                   self.deliberate_exit, line_span=(self.first_line, self.last_line),
                   cut_lines=self.cut_lines, failure_after=self.whole_before(live_from) if failure else 0,
                   resumed_from=self.resumed_from, logged_peak=self.logged_peak, saving=self.saving,
                   out_of_order=self.out_of_order)

    def whole_before(self, live_from: int) -> int:
        """The iteration of the last whole iteration line before the first failure marker from line ``live_from``
        on (:func:`first_marker_index`), 0 if there is none before it."""
        marker = first_marker_index(self.lines, live_from)
        return max((iteration for index, iteration in self.whole if index < marker), default=0)

    def live_from(self) -> int:
        """The index of the first line whose failure markers count: training went on past every marker before it.
        A marker is followed by proof of that when two iteration lines follow it, or one followed by megatron's
        end-of-training or early-exit line (both printed after a barrier or collective that every rank reached).
        One iteration line alone is no proof: with pipeline parallelism the last stage can print iteration N's line
        after the first stage died in iteration N+1. ``Termination requested`` is no proof either: megatron's
        signal handler prints it without a collective, e.g. on the SIGTERM srun sends when another task died."""
        ended = self.finished or (self.deliberate_exit is not None and self.deliberate_exit.kind != "termination")
        if ended and self.heads:
            return self.heads[-1]
        return self.heads[-2] if len(self.heads) >= 2 else 0


def parse_log_text(text: str, path: str = "<log>", written_at: float | None = None) -> RunLog:
    """Parse a Megatron log's text (see module docstring), the second copy of output written into it twice left out
    (:func:`doubled_lines`); ``written_at`` is :attr:`RunLog.written_at`."""
    iterations: dict[int, IterationLine] = {}
    runs: list[Run] = []
    current = _RunText()
    in_args = False
    lines = log_lines(text)
    doubled, copies = doubled_lines(lines)
    for number, line in enumerate(lines, start=1):
        if number - 1 in copies:  # part of the run's lines in the file, not read again
            current.last_line = number
            continue
        block = _ARGS_START.search(line) is not None
        head = _ITERATION.search(line)
        loaded = _LOADED_CHECKPOINT.search(line)
        if block and (current.own_block or current.start is not None):
            runs.append(current.frozen())
            current = _RunText(first_line=number)
        elif current.start is not None and (loaded or head and int(head["iteration"]) <= current.previous):
            runs.append(current.frozen())
            current = current.inheritor(number)
        current.lines.append(line)
        current.last_line = number
        if block:
            current.own_block = in_args = True
            continue
        if in_args and head:  # the block's end line was lost: training has begun
            in_args, current.args_complete = False, True
        if vocabulary := _PADDED_VOCAB.search(line):  # printed after the block, read even if its end line was lost
            current.vocabulary = (int(vocabulary["size"]), int(vocabulary["padded"]))
            continue
        if (peak := parse_basis(line)) is not None:
            current.logged_peak = peak
            continue
        if in_args:
            if _ARGS_END.search(line):
                in_args, current.args_complete = False, True
            elif match := _ARG_LINE.search(line):
                current.args[match["name"]] = parse_value(match["value"].strip())
            continue
        if _TRAINING_DONE.search(line):
            current.finished = True
            _before_iterations(current, RankZeroLine(number, "megatron's end-of-training line", math.inf))
            continue
        if loaded:  # a start's own, before its first iteration line: one after them began a new run above
            current.resumed_from = int(loaded["iteration"])
            _before_iterations(current, RankZeroLine(number, f"the checkpoint load of iteration "
                                                             f"{current.resumed_from}", current.resumed_from + 1))
            continue
        if saving := _SAVING.search(line):
            current.saving = CheckpointSave(int(saving["iteration"]), _valid_time(saving["stamp"]))
            _before_iterations(current, RankZeroLine(number, f"the checkpoint save of iteration "
                                                             f"{current.saving.iteration}", current.saving.iteration))
            continue
        if _SAVED.search(line):
            current.saving = None
            continue
        if exit_ := deliberate_exit(line):
            current.deliberate_exit = exit_
            if exit_.kind != "termination":  # a signal handler's, which may come before any iteration
                _before_iterations(current, RankZeroLine(number, "megatron's early-exit line", math.inf))
            continue
        if head is None:
            continue
        iteration = int(head["iteration"])  # a cut line still marks where a run starts
        if current.start is None:
            current.start = iteration
            current.out_of_order = _out_of_order(current.rank_zero, iteration)
        current.previous, current.finished, current.deliberate_exit, current.saving = iteration, False, None, None
        current.heads.append(len(current.lines) - 1)
        if (record := _parse_iteration(line, head, run=len(runs))) is None:
            current.cut_lines[iteration] = number
            continue
        iterations[iteration] = record
        current.whole.append((len(current.lines) - 1, iteration))
        current.last_iteration = iteration
        current.logged_train_iters = max(current.logged_train_iters or 0, record.train_iters)
    runs.append(current.frozen())
    return RunLog(path, iterations, tuple(runs), doubled, written_at)


def _before_iterations(run: _RunText, line: RankZeroLine) -> None:
    """Keep rank 0's ``line`` in ``run`` while the run has printed no iteration line (:func:`_out_of_order` reads
    them at its first)."""
    if run.start is None:
        run.rank_zero.append(line)


def _out_of_order(rank_zero: Sequence[RankZeroLine], first: int) -> RankZeroLine | None:
    """The first of ``rank_zero`` (rank 0's lines before a run's first iteration line, at iteration ``first``) that
    megatron prints only after that iteration (:attr:`RankZeroLine.first_after`): its end-of-training or early-exit
    line, the save of a later iteration, the load of a checkpoint of that iteration or a later one (a start trains
    the iteration after the checkpoint it loads). Rank 0 prints them, the last rank the iteration lines, so such a
    log holds per-task output files put one after the other (``srun -o out.%t``, then ``cat out.0 out.N``), whose
    lines are not in the order megatron printed them: how the run ended and which start loaded or saved which
    checkpoint are not where the parse looks for them. None when every line can come before it (a resumed start's
    own load line; an upcycled model's save of iteration 1 before training)."""
    return next((line for line in rank_zero if first < line.first_after), None)


def doubled_lines(lines: list[str]) -> tuple[str, frozenset[int]]:
    """(:attr:`RunLog.doubled`, the indices in ``lines`` of the second copies to leave out) of a log into which the
    job's output was written twice, read otherwise as a restart at each repeated iteration line; ('', empty) for
    any other log. Iteration lines are compared whole: their timestamps (to the microsecond) and losses make two
    starts of the program print different lines, so a real restart (a requeue or resume starting again at a lower
    iteration) is never taken for a copy. Once the log shows doubling (:func:`_shows_doubling`), two forms: all
    iteration lines repeated after the last (:func:`_repeated_run`, the whole run appended to its log); else each
    iteration line equal to an earlier one is a copy, wherever it is, and so is each piece of output repeated right
    after itself (:func:`_repeated_pieces`): a ``tee -a`` into the file that ``sbatch -o`` also writes puts each of
    its reads there twice, and a read may hold several lines (two iteration lines, the arguments block), so a copy
    is not always the line right after the one it repeats."""
    heads = [index for index, line in enumerate(lines) if _ITERATION.search(line)]
    repeated = _repeated_heads(lines, heads)
    if not _shows_doubling(len(heads) - len(repeated), len(repeated)):
        return "", frozenset()
    if len(heads) > 2 and (whole := _repeated_run(lines, heads))[0]:  # two lines A A are read as repeated pieces
        return whole
    count = len(repeated)
    return (f"{count} iteration line{'s' if count > 1 else ''} appear{'' if count > 1 else 's'} twice",
            repeated | _repeated_pieces(lines))


def _repeated_heads(lines: list[str], heads: list[int]) -> frozenset[int]:
    """The indices among ``heads`` (those of ``lines``' iteration lines) of the lines whose whole text an earlier
    iteration line of the log has."""
    seen: set[str] = set()
    repeated = set()
    for index in heads:
        if lines[index] in seen:
            repeated.add(index)
        seen.add(lines[index])
    return frozenset(repeated)


def _shows_doubling(distinct: int, repeated: int) -> bool:
    """A log with ``distinct`` different iteration lines of which ``repeated`` lines repeat an earlier one shows its
    output written twice: two repeated lines or more, or one in a log of one or two different lines (doubled, then
    cut after its second line). One repeated line among more could be a restart printing a line again (a Megatron
    without timestamps replaying the same iteration): it says nothing of the others."""
    return repeated >= 2 or (repeated == 1 and distinct <= 2)


MAX_PIECE_LINES = 8192
"""The most lines one piece of output may have in :func:`_repeated_pieces`: ``tee`` reads at most 8 KiB at a time,
so a larger piece repeated right after itself is no copy of one read."""

MAX_PIECE_TRIES = 32
"""How many later lines equal to a piece's first line :func:`_piece_size` tries as the start of its copy: a line that
comes often (a blank line, a warning every rank prints alike) would otherwise be compared with each of its
repetitions, thousands in a long log. A piece holding more repetitions of its first line than this is passed over
(its iteration lines are still found as copies by their text)."""


def _repeated_pieces(lines: list[str]) -> frozenset[int]:
    """The indices of the lines that repeat the piece of output just before them, in a log whose output was written
    twice piece by piece (each read of a ``tee`` written twice, back to back: ``A B A B C C``): from the first line
    on, the shortest piece the lines after it repeat whole is taken as a piece and its repetition as the copy, and
    the search goes on after the copy; a line no piece starting with it explains (output written once, e.g. stderr
    or slurmstepd's) is read and passed."""
    where: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        where.setdefault(line, []).append(index)
    copies: set[int] = set()
    index = 0
    while index < len(lines):
        size = _piece_size(lines, where[lines[index]], index)
        copies.update(range(index + size, index + 2 * size))
        index += 2 * size if size else 1
    return frozenset(copies)


def _piece_size(lines: list[str], same: list[int], start: int) -> int:
    """The length of the shortest piece ``lines[start:start + k]`` that the next ``k`` lines repeat, 0 for none;
    ``same`` lists (ascending) the indices of the lines equal to ``lines[start]``, where such a repetition begins
    (the next :data:`MAX_PIECE_TRIES` of them are tried)."""
    first = bisect.bisect_right(same, start)
    for position in range(first, min(first + MAX_PIECE_TRIES, len(same))):
        again = same[position]
        size = again - start
        if size > MAX_PIECE_LINES or again + size > len(lines):
            return 0
        if all(lines[start + offset] == lines[again + offset] for offset in range(1, size)):
            return size
    return 0


def _repeated_run(lines: list[str], heads: list[int]) -> tuple[str, frozenset[int]]:
    """(:attr:`RunLog.doubled`, the copy's indices) of a log whose iteration lines (at indices ``heads``) are the
    same sequence twice, e.g. a run's whole output appended to its own log: the copy runs from the first arguments
    block after the first half's last iteration line (else from the second half's first iteration line) to the
    second half's last iteration line; ('', empty) when the halves differ."""
    half = len(heads) // 2
    if not half or len(heads) % 2 or any(lines[a] != lines[b] for a, b in zip(heads[:half], heads[half:], strict=True)):
        return "", frozenset()
    blocks = [index for index in range(heads[half - 1] + 1, heads[half]) if _ARGS_START.search(lines[index])]
    first = blocks[0] if blocks else heads[half]
    return f"the whole run appears twice (lines {first + 1}-{heads[-1] + 1} repeat it)", frozenset(range(first, heads[-1] + 1))


def log_lines(text: str) -> list[str]:
    """``text``'s lines as ``wc -l``, ``grep -n`` and ``head -n`` count them, so that the line numbers a status names
    are theirs: a line ends at ``\\n`` only (a progress bar's lone ``\\r``, a form feed or U+2028 ends none, though
    ``str.splitlines`` breaks there), less a ``\\r`` before it (CRLF line ends)."""
    lines = text.split("\n")
    if lines[-1] == "":  # the text's last line ends with \n, or the text is empty
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def deliberate_exit(line: str) -> DeliberateExit | None:
    """The early exit that megatron's message on ``line`` reports (see :data:`_EXITS`), None if the line has none."""
    for pattern, kind in _EXITS:
        if match := pattern.search(line):
            iteration = match.groupdict().get("iteration")
            return DeliberateExit(kind, int(iteration) if iteration else None)
    return None


def _parse_iteration(line: str, head: re.Match, run: int) -> IterationLine | None:
    """The numbers of a ``training_log`` line whose ``iteration i/n |`` head is ``head``, printed by start ``run``
    of the program; None when the line is cut (a field read is incomplete or the last field is missing)."""
    elapsed, skipped, nan = (regex.search(line) for regex in (_ELAPSED, _SKIPPED, _NAN))
    if elapsed is None or skipped is None or nan is None:
        return None
    tflops, batch, consumed = _TFLOPS.search(line), _BATCH.search(line), _CONSUMED.search(line)
    return IterationLine(int(head["iteration"]), int(head["total"]), float(elapsed["ms"]),
                         float(tflops["tflops"]) if tflops else None, int(batch["gbs"]) if batch else None,
                         int(skipped["count"]), int(nan["count"]), run,
                         int(consumed["samples"]) if consumed else None, printed_at(line[:head.start()]))


def printed_at(before_head: str) -> datetime | None:
    """The time in the timestamp that ends ``before_head`` (an iteration line's text before its ``iteration i/n``
    head, :data:`_STAMP`), None when there is none or it names no valid time (a line garbled by another rank)."""
    stamp = _STAMP.search(before_head)
    return None if stamp is None else _valid_time(stamp["stamp"])


def _valid_time(stamp: str | None) -> datetime | None:
    """The time a megatron timestamp's text ``stamp`` names (``2026-10-19 12:00:05.123456``), None for no text or one
    that names no valid time (a line garbled by another rank)."""
    if stamp is None:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def detect_failure(lines: list[str], live_from: int) -> str:
    """The status of the first of :data:`FAILURE_MARKERS` that ``lines`` (one run's part of a log) show from line
    ``live_from`` on, '' if none (markers on earlier lines are ones the run went on after, e.g. the traceback of a
    handled W&B or dataloader error: see :meth:`_RunText.live_from`); the traceback of an exception Python ignored
    or that ended a thread other than the main one (:func:`mark_ignored_tracebacks`) is no crash."""
    text = "\n".join(mark_ignored_tracebacks(lines)[live_from:])  # marked first: a header may precede live_from
    if (found := slurm_stop(text)) is None:
        return first_failure(text, _WITHOUT_STOPS)
    stop, status = found
    before = _before_stop(text, text.rfind("\n", 0, stop.start()) + 1)
    return first_failure(before, FAILURE_MARKERS[:_STOP_RANK]) or status(stop, text)


def first_marker_index(lines: list[str], live_from: int) -> int:
    """The index in ``lines`` (one run's part of a log) of the first line from ``live_from`` on that shows any of
    :data:`FAILURE_MARKERS`, the traceback of an exception Python went on after left out
    (:func:`mark_ignored_tracebacks`); ``len(lines)`` if none does. Any marker counts, even one whose status is a
    consequence of another (torchrun's own traceback): an earlier marker only moves the failure earlier."""
    text = "\n".join(mark_ignored_tracebacks(lines)[live_from:])
    starts = [match.start() for pattern, _ in FAILURE_MARKERS if (match := pattern.search(text))]
    return live_from + text.count("\n", 0, min(starts)) if starts else len(lines)


def slurm_stop(text: str) -> tuple[re.Match, FailureStatus] | None:
    """slurmstepd's first line in ``text`` (a run's part of a log) of a step it ends (:data:`SLURM_STOPS`) and that
    line's status, None if there is none. The markers after it are its consequences (torchrun's ``SignalException``,
    a rank's NCCL watchdog or ``DistBackendError`` finding the others gone, ``terminate called after throwing``), so
    the status names the stop (a time limit, a node failure, a memory error); only those before it say the run
    failed first."""
    found = [(match, status) for pattern, status in SLURM_STOPS if (match := pattern.search(text))]
    return min(found, key=lambda pair: pair[0].start(), default=None)


def _before_stop(text: str, stop: int, no_crash: re.Pattern | None = None) -> str:
    """``text`` up to the stop line that begins at ``text[stop]``, with the exception line of each traceback whose
    header comes before it appended where that line comes after it: slurmstepd writes from a process of its own, so
    its line can land inside a rank's traceback, which was raised before it. A traceback before the stop that shows
    no exception line at all is one the stop cut short, and one whose exception line shows ``no_crash`` is none the
    caller counts: its header is renamed so that it reads as no crash."""
    pieces: list[str] = []
    moved: list[str] = []
    done = 0
    for header in _TRACEBACK_MARKER.finditer(text, 0, stop):
        line = _exception_line(text, header.start())
        if line is None or (no_crash is not None and no_crash.search(text, line[0], line[1])):
            pieces += [text[done:header.start()], "(traceback cut short)" if line is None else "(traceback of no crash)"]
            done = header.end()
        if line is not None and line[0] >= stop:
            moved.append(text[line[0]:line[1]])
    return "".join([*pieces, text[done:stop], *(f"{line}\n" for line in moved)])


def first_failure(text: str, markers: Sequence[tuple[re.Pattern, FailureStatus]]) -> str:
    """The status of the first of ``markers`` (in their priority order) that ``text`` shows, '' if none."""
    for pattern, status in markers:
        if (match := pattern.search(text)) and (found := status(match, text)):
            return found
    return ""


def mark_ignored_tracebacks(lines: list[str]) -> list[str]:
    """``lines`` (a copy) with the traceback header of each exception Python went on after renamed, so that it reads as no
    crash: a traceback that follows an ``Exception ignored ...`` or ``Exception in thread ...`` line
    (:data:`_IGNORED_HEADER`) of its launcher prefix (``0: `` of ``srun --label``, ``[rank3]:``, or none) whose
    traceback has not come yet. Lines of other prefixes may come between (ranks shutting down at once interleave
    theirs), and so may lines of other exception reports of the same prefix: the ranks of a node share one prefix
    (one srun task running torchrun), or none, and print their reports at once, line by line. Any other line of the
    prefix ends its waiting headers, and so does the exception line of a report without a traceback."""
    waiting: dict[str, list[int]] = {}  # prefix -> [headers awaiting their traceback, tracebacks awaiting their end]
    lines = list(lines)
    for k, line in enumerate(lines):
        at = line.find(_TRACEBACK)
        if at >= 0 and (counts := waiting.get(line[:at])):
            if counts[0]:
                counts[0] -= 1
                lines[k] = f"{line[:at]}(ignored exception's traceback){line[at + len(_TRACEBACK):]}"
            counts[1] += 1
        for prefix, counts in list(waiting.items()):
            kind = _report_line(line[len(prefix):]) if line.startswith(prefix) else "report"
            if kind == "exception":  # the end of an open traceback, else of a report without one
                counts[1 if counts[1] else 0] -= 1
            if kind == "other" or counts == [0, 0]:
                del waiting[prefix]
        if header := _IGNORED_HEADER.search(line):
            waiting.setdefault(line[:header.start()], [0, 0])[0] += 1
    return lines


def _report_line(text: str) -> str:
    """What ``text`` (a line less its launcher prefix) is in Python's report of an exception: ``exception`` (its
    ``Name: message`` line), ``report`` (a header, a ``Traceback`` line, a frame or source line, a blank line or a
    chained exception's heading), else ``other``."""
    if not text.strip() or text[0].isspace() or _IGNORED_HEADER.match(text) or _REPORT_HEADING.match(text):
        return "report"
    return "exception" if _EXCEPTION.match(text) else "other"


def last_exception(text: str) -> str:
    """``Name: message`` of the exception the last traceback ends with (:func:`exception_after`), '' if none."""
    at = text.rfind(_TRACEBACK)
    return exception_after(text, at) if at >= 0 else ""


def exception_after(text: str, at: int) -> str:
    """``Name: message`` of the exception the traceback whose header begins at ``text[at]`` ends with
    (:func:`_exception_line`), shortened; '' if none."""
    if (line := _exception_line(text, at)) is None:
        return ""
    found = line[2]
    message = f"{found['name']}: {found['message'] or ''}".strip().rstrip(":")
    return message if len(message) <= 80 else message[:77] + "..."


def _exception_line(text: str, at: int) -> tuple[int, int, re.Match] | None:
    """(start, end, :data:`_EXCEPTION` match) of the exception line of the traceback whose header begins at
    ``text[at]``: the first exception line after it with the traceback's launcher prefix (later ones are other
    output, e.g. an exception Python ignored at shutdown; other prefixes are other ranks' lines printed in between);
    None if there is none."""
    prefix = text[text.rfind("\n", 0, at) + 1:at]
    start = text.find("\n", at) + 1
    while start > 0:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end]
        if line.startswith(prefix) and (found := _EXCEPTION.match(line[len(prefix):].strip())):
            return start, end, found
        start = end + 1 if end < len(text) else 0
    return None


def read_log(path: str | Path) -> RunLog:
    """Parse the log file at ``path`` (undecodable bytes replaced, e.g. a log cut mid-character), its line ends as
    written (no newline translation: a lone ``\\r`` ends no line, see :func:`log_lines`); a gzip-, xz-, bzip2- or
    zstd-compressed log (an archived ``slurm-1234.out.gz``) is read through its decompressor (:func:`log_text`). The
    file is opened and read once (see :func:`log_text`); an uncompressed regular file's modification time is
    :attr:`RunLog.written_at`."""
    path = Path(path)
    with path.open("rb") as file:
        data, status = file.read(), os.fstat(file.fileno())
    growing = stat.S_ISREG(status.st_mode) and compression_of(data) is None
    return parse_log_text(text_of(data), str(path), status.st_mtime if growing else None)


@dataclass(frozen=True)
class Compression:
    """A compression an archived log may come in, known by its magic bytes whatever the file's name."""

    name: str
    magic: bytes
    """The first bytes of such a file."""
    decompress: Callable[[bytes], bytes]
    errors: tuple[type[Exception], ...]
    """What :attr:`decompress` raises on a corrupt or cut file."""
    command: str
    """The shell command that shows what is left of a corrupt or cut file."""


NO_ZSTD = ("zstd-compressed, and this Python has no zstd decompressor (Python 3.14's compression.zstd, or the "
           "zstandard package): 'pip install zstandard', or give the log 'zstd -d FILE' writes")
"""The row's reason for a zstd-compressed log this Python cannot read, naming both fixes."""


def _zstd_decompress(data: bytes) -> bytes:
    """``data`` (a zstd file: one or more frames) decompressed by Python 3.14's ``compression.zstd``, else by the
    ``zstandard`` package (:func:`_zstandard_decompress`); :class:`ValueError` :data:`NO_ZSTD` when this Python has
    neither (3.11's standard library reads no zstd). Both are imported by their full names, which a ``None`` in
    :data:`sys.modules` hides (``from compression import zstd`` finds the submodule as an attribute of its package
    once imported, hidden or not), so that a test can take either away."""
    try:
        zstd = importlib.import_module("compression.zstd")
    except ImportError:
        pass
    else:
        return zstd.decompress(data)
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise ValueError(NO_ZSTD) from None
    return _zstandard_decompress(zstandard, data)


def _zstandard_decompress(zstandard: Any, data: bytes) -> bytes:
    """``data`` decompressed frame by frame by the ``zstandard`` module; :class:`EOFError` when a frame is cut before
    its end (its stream reader returns what it has without a word, so the end of each frame is checked)."""
    pieces = []
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        pieces.append(frame.decompress(data))
        if not frame.eof:
            raise EOFError("compressed data ended before the end of its frame")
        data = frame.unused_data
    return b"".join(pieces)


def _zstd_errors() -> tuple[type[Exception], ...]:
    """What the zstd decompressors this Python has raise on a corrupt or cut file."""
    errors: list[type[Exception]] = [EOFError]
    for module in ("compression.zstd", "zstandard"):
        try:
            errors.append(importlib.import_module(module).ZstdError)
        except ImportError:
            continue
    return tuple(errors)


COMPRESSIONS = (
    Compression("gzip", b"\x1f\x8b", gzip.decompress, (EOFError, gzip.BadGzipFile, zlib.error), "gunzip -c"),
    Compression("xz", b"\xfd7zXZ\x00", lzma.decompress, (EOFError, lzma.LZMAError), "xz -dc"),
    Compression("bzip2", b"BZh", bz2.decompress, (EOFError, OSError, ValueError), "bzip2 -dc"),
    Compression("zstd", b"\x28\xb5\x2f\xfd", _zstd_decompress, _zstd_errors(), "zstd -dc"),
)
"""The compressions :func:`log_text` reads (the standard library's gzip, lzma and bz2; zstd through Python 3.14's
``compression.zstd`` or the ``zstandard`` package): ``xz``, ``bzip2`` and ``zstd`` are what ``logrotate`` and
archiving scripts use besides ``gzip``."""


def log_text(path: Path) -> str:
    """The text of the log file at ``path`` (:func:`text_of`). The file is opened and read once, its magic bytes
    taken from what was read: a pipe or FIFO (``oellm table <(cat out.0 out.7)``) cannot be opened again, and a second
    open parsed an emptied pipe as "no arguments block" or hung on a FIFO."""
    with path.open("rb") as file:
        return text_of(file.read())


def compression_of(data: bytes) -> Compression | None:
    """The one of :data:`COMPRESSIONS` whose magic bytes ``data`` starts with, None for none."""
    return next((compression for compression in COMPRESSIONS if data.startswith(compression.magic)), None)


def text_of(data: bytes) -> str:
    """The text of a log file's bytes ``data``, decompressed when they start with the magic bytes of one of
    :data:`COMPRESSIONS` (read as bytes it was "no arguments block (not a Megatron log ...)"). A compressed file
    that is corrupt or cut before its end raises :class:`ValueError` naming the fix, so that its row says why it has
    no numbers; so does one whose decompressor this Python lacks (:data:`NO_ZSTD`)."""
    compression = compression_of(data)
    if compression is not None:
        try:
            data = compression.decompress(data)
        except compression.errors as err:
            raise ValueError(f"{compression.name}-compressed but corrupt or cut ({err}); '{compression.command}' "
                             "shows what is left of it, give that as the log") from err
    return _decoded(data)


def _decoded(data: bytes) -> str:
    """``data`` decoded as a text-mode open of the log decodes it: the locale's encoding, undecodable bytes replaced,
    line ends kept as written (``newline=""``)."""
    with io.TextIOWrapper(io.BytesIO(data), errors="replace", newline="") as text:
        return text.read()
