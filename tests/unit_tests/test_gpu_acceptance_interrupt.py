"""``tools/gpu_acceptance.sh`` interrupted (Ctrl-C to its process group, or SIGTERM to the script alone): every run
still going is stopped before the logs are packed, the summary says the script was interrupted, and the exit status
is 130 or 143. Each run is under coreutils ``timeout``, which puts it in a process group of its own, so the
terminal's SIGINT never reached it: the runs went on writing while the script packed and deleted their logs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_acceptance.sh"
# a GPU machine: every run but the CUDA check and the doctor writes its PID and sleeps; the sleep is the stand-in
# process itself (exec)
SLEEPING_PYTHON3 = """#!/usr/bin/env bash
[[ $1 == -c ]] && echo "CUDA devices: 1" && exit 0
[[ "$*" == *"megatron.oellm doctor"* ]] && exit 0
echo "$$" >> "$FAKE_PIDS"
exec sleep "$FAKE_SLEEP_S"
"""
RUNS_OF_TESTS_AND_BENCH = 7  # six pytest folders and the bench


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an orphan's zombie stays until PID 1 reaps it)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition, limit_s: float) -> bool:
    """Poll ``condition`` every 0.1 s for up to ``limit_s`` seconds; whether it came true."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def started_pids(pids_file: Path) -> list[int]:
    """PIDs the stand-in runs wrote so far."""
    return [int(line) for line in pids_file.read_text().split()] if pids_file.exists() else []


def interrupted_run(tmp_path: Path, send: str) -> tuple[int, Path, list[int]]:
    """Start the script on the tests and bench stages with sleeping stand-in runs, interrupt it once all of them are
    running (``send``: ``"INT"`` to its process group, ``"TERM"`` to its PID); its exit status, OUT_DIR and the PIDs
    of the stand-in runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(SLEEPING_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    pids_file, out_dir = tmp_path / "pids", tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_PIDS": str(pids_file),
           "FAKE_SLEEP_S": str(random.randint(60, 120)), "OELLM_KERNEL_CACHE": str(tmp_path / "cache"),
           "OELLM_WORK": str(tmp_path / "work")}
    script = subprocess.Popen(["bash", str(SCRIPT), str(out_dir), "tests,bench"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: len(started_pids(pids_file)) == RUNS_OF_TESTS_AND_BENCH, 20), started_pids(pids_file)
        if send == "INT":
            os.killpg(script.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        else:
            os.kill(script.pid, signal.SIGTERM)
        status = script.wait(timeout=60)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()
    return status, out_dir, started_pids(pids_file)


@pytest.mark.parametrize(("send", "status"), [("INT", 130), ("TERM", 143)])
def test_an_interrupt_stops_every_run_before_the_logs_are_packed(tmp_path: Path, send: str, status: int) -> None:
    returncode, out_dir, pids = interrupted_run(tmp_path, send)
    try:
        wait_for(lambda: not any(map(alive, pids)), 5)
        left = [pid for pid in pids if alive(pid)]
        assert left == [], f"stand-in runs still running after the script ended: {left}"
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert returncode == status
    summary = (out_dir / "summary.txt").read_text()
    assert f"interrupted by SIG{send}" in summary, summary
    stopped = [line for line in summary.splitlines() if line.startswith(("pytest ", "bench: "))]
    assert len(stopped) == RUNS_OF_TESTS_AND_BENCH and all(": rc 143" in line for line in stopped), summary
    assert (out_dir / "logs.tar.xz").is_file()
    assert sorted(os.listdir(out_dir)) == ["kernel-cache.tar.xz", "logs.tar.xz", "summary.txt"]
