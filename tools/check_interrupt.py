"""Press Ctrl-C on a training run the way a terminal does, and check that it stopped everything it started.

    python tools/check_interrupt.py --log run.log --marker /tmp/run-dir -- bash examples/oellm/<recipe>.sh --local ...

Starts the command in a session of its own (its own foreground process group), with SIGINT, SIGTERM and SIGHUP at
their default actions whatever this script inherited (a background job of a shell ignores SIGINT), and its output
to ``--log``. Once the log shows iteration ``--after-iteration``, SIGINT goes to the whole process group, as the
terminal's Ctrl-C does. Passes (status 0) when the command then ends within ``--grace`` seconds with status 130 and
no process whose command line holds ``--marker`` is left (the ranks: torchrun starts them in sessions of their own,
outside the group the SIGINT reached); this process and its ancestors (a ``timeout`` wrapping it) are not counted.
A process left behind is named and killed; any failure exits 1. Stopped itself (SIGTERM, SIGHUP, SIGINT), it ends
the run and what it left the same way and exits 128 + the signal.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from megatron.oellm.signal_handlers import STOPPING_SIGNALS, handling

INTERRUPTED_STATUS = 128 + signal.SIGINT  # what a shell reports for a command Ctrl-C ended
POLL_S = 0.5
END_WAIT_S = 20.0  # how long a run this script ends (it was stopped itself) gets between SIGTERM and SIGKILL


class Stopped(BaseException):
    """This script got one of :data:`STOPPING_SIGNALS`; a ``BaseException``, as ``KeyboardInterrupt`` is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, and the command after ``--``; refuses a missing command or a marker that is empty."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, help="file the command's stdout and stderr go to")
    parser.add_argument("--marker", required=True,
                        help="text in the command line of every process the run starts (e.g. its output folder)")
    parser.add_argument("--after-iteration", type=int, default=3,
                        help="interrupt once the log shows this iteration (default 3)")
    parser.add_argument("--start-timeout", type=float, default=300.0,
                        help="seconds to wait for that iteration before giving up (default 300)")
    parser.add_argument("--grace", type=float, default=120.0,
                        help="seconds the interrupted run may take to stop (default 120)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the command to run after --")
    if not args.marker.strip():
        parser.error("--marker must not be empty (every process would match it)")
    if args.after_iteration < 1:
        parser.error(f"--after-iteration must be 1 or more, got {args.after_iteration}")
    return args


def _default_signal_actions() -> None:
    """In the child before exec: the signals a terminal sends act as they would in a shell's foreground job."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def start(command: list[str], log: Path) -> subprocess.Popen:
    """``command`` in a new session, its output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_default_signal_actions)


def wait_for_iteration(child: subprocess.Popen, log: Path, iteration: int, timeout: float) -> str | None:
    """None once ``log`` shows a megatron iteration line at ``iteration`` or later; otherwise why not (the command
    ended, or ``timeout`` passed)."""
    pattern = re.compile(rb" iteration +(\d+)/")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(int(n) >= iteration for n in pattern.findall(log.read_bytes())):
            return None
        if child.poll() is not None:
            return f"the command ended (status {child.returncode}) before iteration {iteration}"
        time.sleep(POLL_S)
    return f"no iteration {iteration} within {timeout:g} s"


def ancestors() -> set[int]:
    """This process and every process above it, up to init: they hold the marker in their command lines too."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; the name may hold spaces
    return pids


def processes_matching(marker: str) -> dict[int, str]:
    """PID -> command line of every process, but this one and its :func:`ancestors`, whose command line contains
    ``marker``."""
    found, own = {}, ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in own:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended while we looked
            continue
        if marker in cmdline:
            found[int(entry.name)] = cmdline
    return found


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that still exists."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def end_run(child: subprocess.Popen, marker: str) -> None:
    """End the run and what it started, whatever state it is in: SIGTERM to its group, SIGKILL after
    :data:`END_WAIT_S`, then SIGKILL to every process still carrying ``marker``."""
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=END_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    kill_all(list(processes_matching(marker)))


def check(args: argparse.Namespace) -> list[str]:
    """Run, interrupt and inspect; the failures found (empty when the run stopped as it should). The run is ended
    on the way out in every case, also when this script is stopped."""
    child = start(args.command, args.log)
    try:
        return interrupt_and_inspect(child, args)
    finally:
        end_run(child, args.marker)


def interrupt_and_inspect(child: subprocess.Popen, args: argparse.Namespace) -> list[str]:
    """Ctrl-C once the run reached the iteration, then the failures: a status other than 130, a run still going
    after the grace period, processes left."""
    problem = wait_for_iteration(child, args.log, args.after_iteration, args.start_timeout)
    if problem is not None:
        return [problem]
    sent = time.monotonic()
    os.killpg(child.pid, signal.SIGINT)
    failures = []
    try:
        status = child.wait(timeout=args.grace)
        print(f"stopped {time.monotonic() - sent:.1f} s after SIGINT, status {status}")
        if status != INTERRUPTED_STATUS:
            failures.append(f"status {status}, not {INTERRUPTED_STATUS}")
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        return [f"still running {args.grace:g} s after SIGINT (killed)"]
    time.sleep(1.0)  # a rank that torchrun has just signalled may still be on its way out
    for pid, cmdline in sorted(processes_matching(args.marker).items()):
        failures.append(f"left running: pid {pid}: {cmdline[:200]}")
    return failures


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the interrupted run stopped everything with status 130, 1 otherwise (each failure on a line)."""
    args = parse_args(argv)

    stopped: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        if not stopped:  # later ones must not cut the ending of the run short
            stopped.append(signum)
            raise Stopped(signum)

    try:
        with handling(STOPPING_SIGNALS, stop):
            failures = check(args)
    except Stopped as interrupted:
        print(f"interrupt check: stopped by {interrupted}; the run and the processes it left were ended")
        return 128 + interrupted.signum
    for failure in failures:
        print(f"FAIL: {failure}")
    print("interrupt check: " + ("passed" if not failures else "failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
