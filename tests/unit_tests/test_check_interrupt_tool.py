"""``tools/check_interrupt.py`` against stand-in launchers (CPU): a launcher that stops its rank on Ctrl-C passes, also
when Ctrl-C kills it outright (status 130, as a shell reports it); one that leaves its rank running, ignores Ctrl-C or
ends before the iteration fails, and no stand-in process outlives the check. The launcher gets a working SIGINT even
when the checker was started with SIGINT ignored (a shell's background job), so a pass means the run stopped, not that
the signal never arrived. The tool finds the run's processes by a token in their environment, never by their command
lines: the marker the stand-ins carry in theirs is the tests' own way to find them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "check_interrupt.py"

# A launcher like torchrun under `oellm recipe --local`: starts a "rank" in a session of its own (SIGINT to the
# launcher's group does not reach it), prints megatron-style iteration lines, and on Ctrl-C (Python's default
# KeyboardInterrupt) stops the rank or not, as BEHAVIOUR says.
LAUNCHER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    behaviour, marker = sys.argv[1], sys.argv[2]
    if behaviour == "dies-by-signal":  # no rank, no handler: Python ends by SIGINT itself (status -2)
        print(" [2026-12-05 10:00:00] iteration        3/     400 | lm loss: 5.0", flush=True)
        time.sleep(120)
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker], start_new_session=True)
    if behaviour == "ignores":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if behaviour == "quiet-slow-term":  # never logs an iteration; takes 3 s over SIGTERM and leaves its rank
        def slow_exit(signum, frame):
            open(os.path.join(os.path.dirname(sys.argv[0]), "got-term"), "w").close()
            time.sleep(3)
            sys.exit(143)
        signal.signal(signal.SIGTERM, slow_exit)
        time.sleep(120)
    try:
        for iteration in range(1, 400):
            if behaviour == "ends-early" and iteration == 2:
                rank.kill()
                sys.exit(0)
            print(f" [2026-12-05 10:00:00] iteration {iteration:8d}/     400 | lm loss: 5.0", flush=True)
            time.sleep(0.1)
    except KeyboardInterrupt:
        if behaviour == "stops-rank":
            rank.terminate()
            rank.wait()
        sys.exit(130)
""")


ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def check_command(tmp_path: Path, behaviour: str, *extra: str) -> tuple[list[str], str]:
    """The tool's command line on the stand-in launcher, and the marker the launcher's rank carries."""
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    marker = f"oellm-interrupt-test-{uuid.uuid4().hex}"
    return [sys.executable, str(TOOL), "--log", str(tmp_path / "run.log"), "--after-iteration", "3",
            "--start-timeout", "60", *extra, "--", sys.executable, str(launcher), behaviour, marker], marker


def run_check(tmp_path: Path, behaviour: str, *extra: str, ignore_sigint: bool = False,
              wrapper: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, str]:
    """The tool on the stand-in launcher (under ``wrapper``, a command that runs it); its result and the marker."""
    command, marker = check_command(tmp_path, behaviour, *extra)

    def ignore() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    result = subprocess.run([*wrapper, *command], capture_output=True, text=True, timeout=120, env=ENV,
                            preexec_fn=ignore if ignore_sigint else None)
    return result, marker


def survivors(marker: str) -> list[int]:
    """Processes still carrying ``marker`` in their command line."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.mark.parametrize("ignore_sigint", [False, True], ids=["sigint-default", "started-with-sigint-ignored"])
def test_a_launcher_that_stops_its_rank_passes(tmp_path: Path, ignore_sigint: bool) -> None:
    result, marker = run_check(tmp_path, "stops-rank", ignore_sigint=ignore_sigint)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "status 130" in result.stdout and "interrupt check: passed" in result.stdout
    assert " iteration        3/" in (tmp_path / "run.log").read_text()
    assert survivors(marker) == []


def test_a_wrapper_of_the_tool_is_not_counted_as_left_running(tmp_path: Path) -> None:
    """The acceptance script runs the tool under ``timeout``, which is no process of the run."""
    result, _ = run_check(tmp_path, "stops-rank", wrapper=("timeout", "100"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "interrupt check: passed" in result.stdout


def test_a_launcher_that_ctrl_c_kills_outright_passes_with_status_130(tmp_path: Path) -> None:
    """A command a signal ends returns ``-2`` to subprocess; a shell reports 130, and so does the tool."""
    result, _ = run_check(tmp_path, "dies-by-signal")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "status 130" in result.stdout


def test_a_process_that_only_shares_the_runs_command_line_text_is_left_alone(tmp_path: Path) -> None:
    """Another job on the node whose command line holds the same text (its output folder, say) is no process of the
    run: it is neither reported nor killed. A substring of command lines took it for one and killed it."""
    command, marker = check_command(tmp_path, "leaves-rank")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker])
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
        assert result.returncode == 1 and result.stdout.count("FAIL: left running: pid") == 1, result.stdout
        assert f"pid {bystander.pid}:" not in result.stdout and bystander.poll() is None
        assert survivors(marker) == [bystander.pid]
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda signum: signum.name)
def test_the_tool_stopped_itself_ends_its_run_and_the_rank(tmp_path: Path, signum: signal.Signals) -> None:
    command, marker = check_command(tmp_path, "leaves-rank", "--after-iteration", "100000")
    tool = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=ENV)
    log = tmp_path / "run.log"
    deadline = time.monotonic() + 60
    while " iteration " not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(survivors(marker)) == 3  # the tool, the launcher and its rank
    tool.send_signal(signum)
    out, _ = tool.communicate(timeout=60)
    assert tool.returncode == 128 + signum
    assert f"stopped by {signum.name}" in out
    assert survivors(marker) == []


def test_a_signal_during_the_clean_up_waits_until_the_run_is_ended(tmp_path: Path) -> None:
    """The tool's own SIGTERM arriving while it ended a run (here: one that never reached the iteration and takes 3 s
    over SIGTERM) cut the clean-up short, left the rank running, and still said it had ended everything."""
    command, marker = check_command(tmp_path, "quiet-slow-term", "--start-timeout", "1")
    tool = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=ENV)
    got_term = tmp_path / "got-term"  # the launcher got the tool's SIGTERM: the clean-up is under way
    deadline = time.monotonic() + 60
    while not got_term.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got_term.exists()
    tool.send_signal(signal.SIGTERM)
    out, _ = tool.communicate(timeout=60)
    assert tool.returncode == 143 and "stopped by SIGTERM" in out, out
    assert survivors(marker) == []


def test_a_rank_left_running_fails_is_named_and_killed(tmp_path: Path) -> None:
    result, marker = run_check(tmp_path, "leaves-rank")
    assert result.returncode == 1
    assert result.stdout.count("FAIL: left running: pid") == 1 and marker in result.stdout
    assert survivors(marker) == []


def test_a_launcher_that_ignores_ctrl_c_fails_after_the_grace_period(tmp_path: Path) -> None:
    result, marker = run_check(tmp_path, "ignores", "--grace", "2")
    assert result.returncode == 1
    assert "FAIL: still running 2 s after SIGINT (ended)" in result.stdout
    assert survivors(marker) == []


def test_a_run_that_ends_before_the_iteration_fails(tmp_path: Path) -> None:
    result, marker = run_check(tmp_path, "ends-early")
    assert result.returncode == 1
    assert "FAIL: the command ended (status 0) before iteration 3" in result.stdout
    assert survivors(marker) == []


@pytest.mark.parametrize("args, message", [
    (["--log", "x.log"], "give the command to run after --"),
    (["--log", "x.log", "--after-iteration", "0", "--", "true"], "--after-iteration must be 1"),
    (["--log", "x.log", "--grace", "0.5", "--", "true"], "--grace must be 1"),
    (["--log", "x.log", "--start-timeout", "nan", "--", "true"], "--start-timeout must be 1 or more and finite"),
    (["--log", "x.log", "--grace", "inf", "--", "true"], "--grace must be 1 or more and finite"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "x.log").exists()
    assert os.listdir(tmp_path) == []


def test_a_command_that_cannot_start_is_one_failure_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-launcher"
    result = subprocess.run([sys.executable, str(TOOL), "--log", str(tmp_path / "run.log"), "--", str(missing)],
                            capture_output=True, text=True, timeout=60, env=ENV)
    assert result.returncode == 1 and result.stderr == "", result.stderr
    assert result.stdout.splitlines()[0] == f"FAIL: could not start {missing}: No such file or directory ({missing})"
