"""``run_forwarding_signals``: Ctrl-C (SIGINT to the foreground process group) or SIGTERM reaches the launcher once,
through us, and we wait until it has stopped its processes; ``subprocess.run`` killed it 0.25 s after Ctrl-C, so a
torchrun could not stop its ranks, which stayed on the GPU."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megatron.oellm.child_process import run_forwarding_signals

STAND_IN = """\
import os, signal, sys, time
folder = sys.argv[1]
received = []
def stop(signum, frame):
    received.append(signum)
    time.sleep(float(sys.argv[2]))  # stopping its own processes takes a while
    with open(os.path.join(folder, "stopped"), "w") as file:
        file.write(f"{len(received)} {signum}")
    sys.exit(3)
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, name), stop)
with open(os.path.join(folder, "started"), "w") as file:
    file.write(str(os.getpid()))
time.sleep(60)
"""
"""A launcher that takes ``argv[2]`` seconds to stop after a signal, then writes how many signals it got."""

PARENT = "import sys; from megatron.oellm.child_process import run_forwarding_signals as run; " \
         "sys.exit(run(sys.argv[1:]))"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize(("signum", "to_group"), [(signal.SIGINT, True), (signal.SIGTERM, False),
                                                  (signal.SIGHUP, False)])
def test_a_signal_reaches_the_launcher_once_and_we_wait_for_it(tmp_path, signum, to_group):
    """``to_group``: as a terminal's Ctrl-C, to our whole process group; else to our pid alone (``kill``)."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    stop_s = random.uniform(0.6, 1.2)  # longer than subprocess.run's 0.25 s grace
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, sys.executable, str(stand_in), str(tmp_path),
                               str(stop_s)], start_new_session=True, env=env)
    _wait_for(tmp_path / "started")
    child = int((tmp_path / "started").read_text())
    if to_group:
        os.killpg(parent.pid, signum)
    else:
        parent.send_signal(signum)
    assert parent.wait(timeout=30) == 128 + signum
    assert (tmp_path / "stopped").read_text() == f"1 {int(signum)}"
    assert not _alive(child)


def test_the_launchers_own_status_comes_back(tmp_path):
    status = random.randrange(1, 100)
    assert run_forwarding_signals([sys.executable, "-c", f"import sys; sys.exit({status})"]) == status
    assert run_forwarding_signals([sys.executable, "-c", "pass"], env={**os.environ, "OELLM_UNUSED": "1"}) == 0


def test_our_own_handlers_are_restored():
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    run_forwarding_signals([sys.executable, "-c", "pass"])
    assert {number: signal.getsignal(number) for number in before} == before


def test_a_signal_we_ignore_is_not_passed_on(tmp_path):
    """Under ``nohup`` (SIGHUP ignored) a logout must not stop the launcher: it runs in a session of its own, so only
    we could pass the hang-up on, and an ignored signal stays ignored, as everywhere in this package."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN.replace("time.sleep(60)", "time.sleep(1.5)"))
    parent_code = ("import signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
                   "from megatron.oellm.child_process import run_forwarding_signals as run; sys.exit(run(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen([sys.executable, "-c", parent_code, sys.executable, str(stand_in), str(tmp_path), "0.1"],
                              start_new_session=True, env=env)
    _wait_for(tmp_path / "started")
    parent.send_signal(signal.SIGHUP)
    assert parent.wait(timeout=30) == 0  # the stand-in slept on and ended on its own
    assert not (tmp_path / "stopped").exists()
