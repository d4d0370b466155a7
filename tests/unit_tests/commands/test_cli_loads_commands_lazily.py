"""``oellm`` imports only the module of the subcommand it runs.

A broken ``packaging`` (or any import error in one command's module) crashed ``oellm models`` and ``oellm doctor`` with
a traceback, because the command line imported every command module up front.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _oellm(argv: list[str], shadow: Path) -> subprocess.CompletedProcess:
    """``python -m megatron.oellm ARGV`` with ``shadow`` first on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "megatron.oellm", *argv], capture_output=True, text=True, env=env,
                          timeout=600, check=False, cwd=ROOT)


@pytest.fixture
def broken_packaging(tmp_path: Path) -> Path:
    """A ``packaging`` whose ``packaging.version`` is gone (a half-removed install)."""
    (tmp_path / "packaging").mkdir()
    (tmp_path / "packaging" / "__init__.py").write_text("")
    return tmp_path


def test_models_runs_and_doctor_says_one_line_with_a_broken_packaging(broken_packaging):
    models = _oellm(["models", "--json"], broken_packaging)
    assert models.returncode == 0 and "Traceback" not in models.stderr, models.stderr
    doctor = _oellm(["doctor"], broken_packaging)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    [line] = [line for line in doctor.stderr.splitlines() if "error:" in line]
    assert line.startswith("oellm doctor: error: cannot load this command") and "packaging.version" in line


def test_help_still_lists_every_command_with_its_help_line(broken_packaging):
    from megatron.oellm.cli import _command_help, _command_names

    done = _oellm(["--help"], broken_packaging)
    assert done.returncode == 0, done.stderr
    names = _command_names()
    assert {"doctor", "models", "plan"} <= set(names)
    for name in names:
        help_line = _command_help(name)
        assert help_line, name
        assert name in done.stdout and " ".join(help_line.split()[:4]) in " ".join(done.stdout.split()), name
