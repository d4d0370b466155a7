"""Press Ctrl-C on a training run the way a terminal does, and check that it stopped everything it started.

    python tools/check_interrupt.py --log run.log -- bash examples/oellm/<recipe>.sh --local ...

Starts the command in a session of its own (its own foreground process group), with SIGINT, SIGTERM and SIGHUP at
their default actions whatever this script inherited (a background job of a shell ignores SIGINT), its output to
``--log``, and a fresh token in its environment (``OELLM_INTERRUPT_CHECK``), which every process it starts inherits:
torchrun's ranks, their workers. Once the log shows iteration ``--after-iteration``, SIGINT goes to the whole process
group, as the terminal's Ctrl-C does. Passes (status 0) when the command then ends within ``--grace`` seconds with
status 130 (128 + the signal, as a shell reports a command a signal ended) and no process carrying the token is left
(the ranks run in sessions of their own, outside the group the SIGINT reached). A process left behind is named and
killed; any failure exits 1. Stopped itself (SIGTERM, SIGHUP, SIGINT), it ends the run and what it left the same way,
within :data:`END_WAIT_S` seconds and a moment (a caller's ``timeout -k`` must allow more), and exits 128 + the signal.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from megatron.oellm.child_process import exit_status
from megatron.oellm.signal_handlers import StopSignal, held, raising_on_stop

TOKEN_VARIABLE = "OELLM_INTERRUPT_CHECK"
INTERRUPTED_STATUS = 128 + signal.SIGINT  # what a shell reports for a command Ctrl-C ended
POLL_S = 0.5
END_WAIT_S = 10.0  # between SIGTERM and SIGKILL when this script ends the run (the acceptance script kills after 20)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, and the command after ``--``; refuses a missing command and values below 1 or not finite."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, help="file the command's stdout and stderr go to")
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
    for name in ("after_iteration", "start_timeout", "grace"):
        value = getattr(args, name)
        if not math.isfinite(value) or value < 1:  # nan < 1 is False: nan waited for ever
            parser.error(f"--{name.replace('_', '-')} must be 1 or more and finite, got {value}")
    return args


def _default_signal_actions() -> None:
    """In the child before exec: the signals a terminal sends act as they would in a shell's foreground job."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def start(command: list[str], log: Path, token: str) -> subprocess.Popen:
    """``command`` in a new session, its output to ``log``, ``token`` in its environment."""
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, TOKEN_VARIABLE: token}, start_new_session=True,
                                preexec_fn=_default_signal_actions)


def wait_for_iteration(child: subprocess.Popen, log: Path, iteration: int, timeout: float) -> str | None:
    """None once ``log`` shows a megatron iteration line at ``iteration`` or later; otherwise why not (the command
    ended, or ``timeout`` passed)."""
    pattern = re.compile(rb" iteration +(\d+)/")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(int(n) >= iteration for n in pattern.findall(log.read_bytes())):
            return None
        if child.poll() is not None:
            return f"the command ended (status {exit_status(child.returncode)}) before iteration {iteration}"
        time.sleep(POLL_S)
    return f"no iteration {iteration} within {timeout:g} s"


def processes_with(token: str) -> dict[int, str]:
    """PID -> command line of every process whose environment holds ``token`` (only this user's environments are
    readable: other users' processes are never matched)."""
    wanted = f"{TOKEN_VARIABLE}={token}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():  # this process holds no token: only its child's environment has it
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended while we looked, or not ours
            continue
        found[int(entry.name)] = cmdline
    return found


def kill_all(pids: list[int]) -> list[str]:
    """SIGKILL each of ``pids`` that still exists; a line for each one that could not be killed."""
    problems = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError as err:
            problems.append(f"could not kill pid {pid}: {err.strerror}")
    return problems


def end_run(child: subprocess.Popen, token: str) -> list[str]:
    """End the run and what it started, whatever state it is in: SIGTERM to its group, SIGKILL after
    :data:`END_WAIT_S`, then SIGKILL to every process still carrying ``token``; a line for each that resisted."""
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=END_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return kill_all(list(processes_with(token)))


def check(args: argparse.Namespace) -> list[str]:
    """Run, interrupt and inspect; the failures found (empty when the run stopped as it should). The run is ended
    on the way out in every case, also when this script is stopped."""
    token = uuid.uuid4().hex
    try:
        child = start(args.command, args.log, token)
    except OSError as err:  # no such program, not executable, a --log that cannot be written
        return [f"could not start {args.command[0]}: {err.strerror} ({err.filename or args.log})"]
    failures: list[str] = []
    try:
        failures = interrupt_and_inspect(child, args, token)
    finally:
        with held():  # a signal here would cut the clean-up short and leave the ranks on the GPU
            failures += end_run(child, token)
    return failures


def interrupt_and_inspect(child: subprocess.Popen, args: argparse.Namespace, token: str) -> list[str]:
    """Ctrl-C once the run reached the iteration, then the failures: a status other than 130, a run still going
    after the grace period, processes left."""
    problem = wait_for_iteration(child, args.log, args.after_iteration, args.start_timeout)
    if problem is not None:
        return [problem]
    sent = time.monotonic()
    os.killpg(child.pid, signal.SIGINT)
    try:
        status = exit_status(child.wait(timeout=args.grace))
    except subprocess.TimeoutExpired:
        return [f"still running {args.grace:g} s after SIGINT (ended)"]
    print(f"stopped {time.monotonic() - sent:.1f} s after SIGINT, status {status}")
    failures = [] if status == INTERRUPTED_STATUS else [f"status {status}, not {INTERRUPTED_STATUS}"]
    time.sleep(1.0)  # a rank that torchrun has just signalled may still be on its way out
    for pid, cmdline in sorted(processes_with(token).items()):
        failures.append(f"left running: pid {pid}: {cmdline[:200]}")
    return failures


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the interrupted run stopped everything with status 130, 1 otherwise (each failure on a line)."""
    args = parse_args(argv)
    try:
        with raising_on_stop():
            failures = check(args)
    except StopSignal as interrupted:
        print(f"interrupt check: stopped by {interrupted}; the run and the processes it left were ended")
        return 128 + interrupted.signum
    for failure in failures:
        print(f"FAIL: {failure}")
    print("interrupt check: " + ("passed" if not failures else "failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
