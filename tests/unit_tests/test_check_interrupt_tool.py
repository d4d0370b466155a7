"""``tools/check_interrupt.py`` against stand-in launchers (CPU): a launcher that stops its rank on Ctrl-C passes; one
that leaves its rank running, ignores Ctrl-C or ends before the iteration fails, and no stand-in process outlives
the check. The launcher gets a working SIGINT even when the checker was started with SIGINT ignored (a shell's
background job), so a pass means the run stopped, not that the signal never arrived."""

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
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker], start_new_session=True)
    if behaviour == "ignores":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
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
    return [sys.executable, str(TOOL), "--log", str(tmp_path / "run.log"), "--marker", marker, "--after-iteration",
            "3", "--start-timeout", "60", *extra, "--", sys.executable, str(launcher), behaviour, marker], marker


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


def test_a_wrapper_holding_the_marker_is_not_counted_as_left_running(tmp_path: Path) -> None:
    """The acceptance script runs the tool under ``timeout``, whose command line holds the marker too."""
    result, _ = run_check(tmp_path, "stops-rank", wrapper=("timeout", "100"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "interrupt check: passed" in result.stdout


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


def test_a_rank_left_running_fails_is_named_and_killed(tmp_path: Path) -> None:
    result, marker = run_check(tmp_path, "leaves-rank")
    assert result.returncode == 1
    assert "FAIL: left running: pid" in result.stdout and marker in result.stdout
    assert survivors(marker) == []


def test_a_launcher_that_ignores_ctrl_c_fails_after_the_grace_period(tmp_path: Path) -> None:
    result, marker = run_check(tmp_path, "ignores", "--grace", "2")
    assert result.returncode == 1
    assert "FAIL: still running 2 s after SIGINT (killed)" in result.stdout
    assert survivors(marker) == []


def test_a_run_that_ends_before_the_iteration_fails(tmp_path: Path) -> None:
    result, marker = run_check(tmp_path, "ends-early")
    assert result.returncode == 1
    assert "FAIL: the command ended (status 0) before iteration 3" in result.stdout
    assert survivors(marker) == []


@pytest.mark.parametrize("args, message", [
    (["--log", "x.log", "--marker", "m"], "give the command to run after --"),
    (["--log", "x.log", "--marker", " ", "--", "true"], "--marker must not be empty"),
    (["--log", "x.log", "--marker", "m", "--after-iteration", "0", "--", "true"], "--after-iteration must be 1"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "x.log").exists()
    assert os.listdir(tmp_path) == []
