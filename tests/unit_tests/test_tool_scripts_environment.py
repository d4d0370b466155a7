"""The ``tools/`` shell scripts in the caller's environment: a relative interpreter path (``PYTHON`` /
``TE_PYTHON``) names the caller's file although the scripts change to the repository root, and the bundle scripts
without ``xz`` on PATH stop before they remove an earlier bundle or download anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit_tests.te_site_venv import fake_venv

TOOLS = Path(__file__).resolve().parents[2] / "tools"
RECORDING_PYTHON = ('#!/usr/bin/env bash\nif [ "$1" = -c ] && [ -n "${FAKE_PROBE:-}" ]; then echo "$FAKE_PROBE"; exit 0; fi\n'
                    'echo "$*" >> "$FAKE_LOG"\nexit "${FAKE_STATUS:-0}"\n')
"""A stand-in interpreter: records its arguments and succeeds (``import torch`` too, so nothing is installed), or
exits ``FAKE_STATUS``; with ``FAKE_PROBE`` it answers ``-c`` version probes with that version, unrecorded."""


def _recording_python(folder: Path) -> Path:
    """``folder/bin/python``, a :data:`RECORDING_PYTHON`."""
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(RECORDING_PYTHON)
    python.chmod(0o755)
    return python


@pytest.mark.parametrize(("script", "variable", "args"), [
    ("install.sh", "PYTHON", ["dev"]),
    ("test.sh", "PYTHON", ["-k", "nothing"]),
    ("te_cpu_env.sh", "TE_PYTHON", []),
    ("../examples/oellm/main.sh", "PYTHON", []),
])
def test_a_relative_interpreter_names_the_callers_file(tmp_path, script, variable, args):
    """``PYTHON=.venv/bin/python bash /path/to/tools/install.sh`` from the venv's folder: the scripts change to the
    repository root, where the relative path named nothing (exit 127 before any install)."""
    caller = tmp_path / "with space"
    _recording_python(caller)
    log = tmp_path / "log"
    env = {**os.environ, variable: "bin/python", "FAKE_LOG": str(log), "FAKE_PROBE": "3.12"}
    if script == "te_cpu_env.sh":  # the stand-in makes no venv: stop right after it was called to make one
        env["FAKE_STATUS"] = "3"
        args = [str(tmp_path / "venv")]
    done = subprocess.run(["bash", str(TOOLS / script), *args], cwd=caller, env=env, capture_output=True, text=True,
                          timeout=120)
    assert "No such file" not in done.stderr, done.stderr
    assert log.exists() and log.read_text().strip(), done.stderr
    if script == "te_cpu_env.sh":
        assert done.returncode == 2 and "-m venv" in log.read_text() and "-m venv" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
    if script.endswith("main.sh"):  # install.sh, then the recipe wrapper, both in the caller's interpreter
        calls = log.read_text().splitlines()
        assert "- hf,gdn" in calls, calls  # install.sh's extras check, in this interpreter
        assert "-m megatron.oellm recipe" in calls[-1], calls
    if script == "test.sh":  # the interpreter install.sh used is the one ruff and pytest then run under
        calls = log.read_text().splitlines()
        assert "- dev,hf,gdn,plot" in calls, calls  # install.sh's extras check, in this interpreter
        assert calls[-1] == "-m pytest -q tests/unit_tests -k nothing"


def _path_without(tmp_path: Path, missing: str, tools: tuple[str, ...]) -> str:
    """A PATH folder linking ``tools`` found on this PATH, but not ``missing``."""
    folder = tmp_path / f"path-without-{missing}"
    folder.mkdir()
    for tool in tools:
        if tool != missing and shutil.which(tool):
            (folder / tool).symlink_to(shutil.which(tool))
    return str(folder)


SHELL_TOOLS = ("bash", "env", "tar", "xz", "split", "sha256sum", "rm", "mkdir", "ls", "mv", "du", "cut", "tr",
               "sed", "cat", "realpath", "dirname", "basename", "wc")


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tools")
def test_te_site_bundle_without_xz_keeps_the_earlier_bundle(tmp_path):
    """Without xz the script used to delete the earlier bundle's parts and checksums, then fail: now it refuses first."""
    fake_venv(tmp_path / "venv")
    out = tmp_path / "out"
    out.mkdir()
    earlier = {"te-site.tar.xz.part-aa": b"earlier", "te-site.sha256": b"checksums"}
    for name, data in earlier.items():
        (out / name).write_bytes(data)
    env = {**os.environ, "PATH": _path_without(tmp_path, "xz", SHELL_TOOLS)}
    done = subprocess.run([shutil.which("bash"), str(TOOLS / "te_site_bundle.sh"), str(tmp_path / "venv"), str(out), "1"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "xz is not on PATH" in done.stderr, done.stderr
    assert {path.name: path.read_bytes() for path in out.iterdir()} == earlier


@pytest.mark.skipif(sys.platform != "linux", reason="GNU tools")
def test_build_site_bundle_without_xz_stops_before_downloading(tmp_path):
    """Without xz the bundle script used to download every wheel, then fail at packing with a .partial left behind."""
    bin_dir = tmp_path / "bin"
    python3 = _recording_python(tmp_path)
    python3.rename(python3.with_name("python3"))
    log = tmp_path / "log"
    env = {**os.environ, "FAKE_LOG": str(log),
           "PATH": f"{bin_dir}{os.pathsep}{_path_without(tmp_path, 'xz', SHELL_TOOLS)}"}
    done = subprocess.run([shutil.which("bash"), str(TOOLS / "build_site_bundle.sh"), "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "xz is not on PATH" in done.stderr, done.stderr
    assert not log.exists() and not (tmp_path / "out").exists()
