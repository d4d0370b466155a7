"""``tools/install.sh`` checks that ``PYTHON`` is a Python 3.11 or later in syntax every Python reads, before any
download: a Python 2 stopped on the f-strings of the later checks with a traceback, ``/bin/false`` exited 1 without
a word and ``/bin/true`` "installed" nothing with exit status 0. ``examples/oellm/main.sh --help`` answers before it
installs anything."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLD_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [[ "$2" == *"version_info <"* ]]; then exit 1; fi
echo 3.{minor}
"""


def _install(tmp_path: Path, python: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "tools" / "install.sh"), "dev"], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": python, "FAKE_LOG": str(tmp_path / "calls.log")}, timeout=60,
                          check=False)


@pytest.mark.parametrize("program", ["true", "false"])
def test_a_program_that_is_no_python_is_refused(tmp_path, program):
    path = next(str(Path(d) / program) for d in ("/usr/bin", "/bin") if (Path(d) / program).exists())
    done = _install(tmp_path, path)
    assert done.returncode == 2 and done.stderr == (f"error: install.sh: PYTHON={path} does not run as a Python; "
                                                    "name one, e.g. PYTHON=python3.12\n")


def test_a_python_older_than_3_11_is_refused_naming_its_version(tmp_path):
    minor = random.randint(6, 10)
    old = tmp_path / f"python3.{minor}"
    old.write_text(OLD_PYTHON.format(minor=minor))
    old.chmod(0o755)
    done = _install(tmp_path, str(old))
    assert done.returncode == 2 and done.stderr == (f"error: install.sh: megatron-oellm needs Python >= 3.11, "
                                                    f"PYTHON={old} is 3.{minor}; name another with PYTHON=python3.12\n")
    assert not any(" pip " in f" {call} " for call in (tmp_path / "calls.log").read_text().splitlines())


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_main_sh_help_installs_nothing(tmp_path, flag):
    recorder = tmp_path / "python"
    recorder.write_text('#!/usr/bin/env bash\necho "$*" >> "$FAKE_LOG"\n')
    recorder.chmod(0o755)
    done = subprocess.run(["bash", str(ROOT / "examples" / "oellm" / "main.sh"), flag], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": str(recorder), "FAKE_LOG": str(tmp_path / "calls.log")},
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("# The main job. Installs what it needs")
    assert not (tmp_path / "calls.log").exists()
