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
Each start of the program is a *run*: a new arguments block or an iteration number that does not increase (a
restart or resume appending to the same log) starts the next one.
A run is *failed* when the log shows an out-of-memory error, an NCCL timeout or a Python traceback, and *finished*
when megatron's ``[after training is done]`` line follows its last iteration line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ARGS_START = re.compile(r"-{3,} arguments -{3,}")
_ARGS_END = re.compile(r"-{3,} end of arguments -{3,}")
_ARG_LINE = re.compile(r"(?:^|\s)(?P<name>[A-Za-z_]\w*) (?P<dots>\.*) (?P<value>.*)$")
_ITERATION = re.compile(r"\biteration\s+(?P<iteration>\d+)/\s*(?P<total>\d+) \|")
_NUMBER = r"-?(?:\d+(?:\.\d+)?|nan|inf)"
"""A float as Megatron's ``{:.1f}`` prints it, ``nan`` and ``inf`` included."""
_ELAPSED = re.compile(rf"elapsed time per iteration \(ms\): (?P<ms>{_NUMBER}) \|")
_TFLOPS = re.compile(rf"throughput per GPU \(TFLOP/s/GPU\): (?P<tflops>{_NUMBER}) \|")
_BATCH = re.compile(r"global batch size:\s*(?P<gbs>\d+) \|")
_SKIPPED = re.compile(r"number of skipped iterations:\s*(?P<count>\d+) \|")
_NAN = re.compile(r"number of nan iterations:\s*(?P<count>\d+) \|")
_TRAINING_DONE = re.compile(r"\[after training is done\] datetime:")
_EXCEPTION = re.compile(r"^(?:.*?: )?(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)): ?(?P<message>.*)$")

FAILURE_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("out of memory", ("CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory")),
    ("NCCL timeout", ("Watchdog caught collective operation timeout", "NCCL timeout", "NCCL communicator was aborted")),
    ("crashed", ("Traceback (most recent call last)",)),
)
"""Failure kind -> log substrings that show it, in priority order (an OOM also prints a traceback)."""


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
    """The start of the program that printed the line (an index into :attr:`RunLog.run_starts`)."""


@dataclass(frozen=True)
class RunLog:
    """One parsed Megatron log."""

    path: str
    args: dict[str, Any] = field(default_factory=dict)
    """The printed arguments, values read as Python literals where they are (else the printed string)."""
    iterations: dict[int, IterationLine] = field(default_factory=dict)
    """Iteration -> its line (the last one printed wins, e.g. after a restart in the same log)."""
    failure: str = ""
    """``out of memory``, ``NCCL timeout`` or ``crashed (ExceptionName: message)``; empty when none is shown."""
    args_complete: bool = False
    """The arguments block's end line was seen (False: no block, or the log stops inside it)."""
    run_starts: tuple[int, ...] = ()
    """The first iteration printed by each run (start of the program) in the log, in log order."""
    finished: bool = False
    """Megatron's ``[after training is done]`` line follows the last iteration line: the run reached its end, so
    iterations past the last line were run but not logged (``train_iters`` not a multiple of ``log_interval``)."""

    @property
    def train_iters(self) -> int | None:
        """Iterations the run was asked for (from the arguments or the iteration lines)."""
        if isinstance(self.args.get("train_iters"), int):
            return self.args["train_iters"]
        return max((line.train_iters for line in self.iterations.values()), default=None)

    @property
    def last_iteration(self) -> int:
        """The last iteration that printed a line (0 if none)."""
        return max(self.iterations, default=0)


def parse_value(text: str) -> Any:
    """A printed argument value as the Python value it was (``4096``, ``True``, ``None``, lists), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def parse_log_text(text: str, path: str = "<log>") -> RunLog:
    """Parse a Megatron log's text (see module docstring)."""
    args: dict[str, Any] = {}
    iterations: dict[int, IterationLine] = {}
    run_starts: list[int] = []
    in_args = args_complete = finished = False
    new_run, previous = True, 0
    for line in text.splitlines():
        if _TRAINING_DONE.search(line):
            finished = True
            continue
        if _ARGS_START.search(line):
            in_args = new_run = True
            continue
        if in_args:
            if _ARGS_END.search(line):
                in_args, args_complete = False, True
            elif match := _ARG_LINE.search(line):
                args[match["name"]] = parse_value(match["value"].strip())
            continue
        if (head := _ITERATION.search(line)) is None:
            continue
        iteration = int(head["iteration"])  # a cut line still marks where a run starts
        finished = False
        if new_run or iteration <= previous:
            run_starts.append(iteration)
            new_run = False
        previous = iteration
        if (record := _parse_iteration(line, head, run=len(run_starts) - 1)) is not None:
            iterations[iteration] = record
    return RunLog(path, args, iterations, detect_failure(text), args_complete, tuple(run_starts), finished)


def _parse_iteration(line: str, head: re.Match, run: int) -> IterationLine | None:
    """The numbers of a ``training_log`` line whose ``iteration i/n |`` head is ``head``, printed by start ``run``
    of the program; None when the line is cut (a field read is incomplete or the last field is missing)."""
    elapsed, skipped, nan = (regex.search(line) for regex in (_ELAPSED, _SKIPPED, _NAN))
    if elapsed is None or skipped is None or nan is None:
        return None
    tflops, batch = _TFLOPS.search(line), _BATCH.search(line)
    return IterationLine(int(head["iteration"]), int(head["total"]), float(elapsed["ms"]),
                         float(tflops["tflops"]) if tflops else None, int(batch["gbs"]) if batch else None,
                         int(skipped["count"]), int(nan["count"]), run)


def detect_failure(text: str) -> str:
    """The first failure kind of :data:`FAILURE_MARKERS` the log shows ('' if none); a crash names its exception."""
    for kind, markers in FAILURE_MARKERS:
        if any(marker in text for marker in markers):
            if kind == "crashed":
                exception = last_exception(text)
                return f"crashed ({exception})" if exception else kind
            return kind
    return ""


def last_exception(text: str) -> str:
    """``Name: message`` of the last exception line after the last traceback (shortened), '' if none."""
    tail = text[text.rfind("Traceback (most recent call last)"):]
    found = [m for line in tail.splitlines() if (m := _EXCEPTION.match(line.strip()))]
    if not found:
        return ""
    message = f"{found[-1]['name']}: {found[-1]['message']}".strip().rstrip(":")
    return message if len(message) <= 80 else message[:77] + "..."


def read_log(path: str | Path) -> RunLog:
    """Parse the log file at ``path`` (undecodable bytes replaced, e.g. a log cut mid-character)."""
    path = Path(path)
    return parse_log_text(path.read_text(errors="replace"), str(path))
