"""``tools/install.sh``'s argument: ``--help``, a second word and an extra that setup.py does not declare are answered
before anything is installed (pip only warns about an unknown extra and installs without it, after the downloads).

The interpreter is a stand-in whose ``-m pip`` only records its arguments; everything else runs with this Python
under ``-S`` (the checks need only the standard library), with a fake torch and Triton so nothing else is asked for.
"""

from __future__ import annotations

import os
import random
import shlex
import string
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit_tests.setup_py import declared_extras

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "install.sh"
EXTRAS = declared_extras()

FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$*" >> "$FAKE_LOG"; exit 0; fi
case "$*" in *megatron.core*) echo "megatron-oellm (stand-in)"; exit 0 ;; esac
PYTHONPATH="$FAKE_SITE" exec REAL_PYTHON -S "$@"
"""


def run_install(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """install.sh with ``args`` against the stand-in interpreter; returns the process and the recorded pip calls."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("class version:\n    cuda = None\n")
    (site / "triton.py").write_text("")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.replace("REAL_PYTHON", shlex.quote(sys.executable)))
    python.chmod(0o755)
    log = tmp_path / "pip.log"
    log.touch()
    env = {"PATH": f"/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path), "PYTHON": str(python), "FAKE_LOG": str(log),
           "FAKE_SITE": str(site)}
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    return done, log.read_text().splitlines()


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_usage_and_installs_nothing(tmp_path: Path, flag: str) -> None:
    done, calls = run_install(tmp_path, flag)
    assert done.returncode == 0, done.stderr
    assert "bash tools/install.sh [EXTRAS]" in done.stdout and calls == []


def test_a_second_word_is_refused_not_dropped(tmp_path: Path) -> None:
    first, second = random.sample(EXTRAS, 2)
    done, calls = run_install(tmp_path, first, second)
    assert done.returncode == 2 and "one comma-separated EXTRAS" in done.stderr and second in done.stderr
    assert calls == []


def test_an_unknown_extra_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    typo = random.choice(EXTRAS) + random.choice(string.ascii_lowercase)
    known = random.choice(EXTRAS)
    done, calls = run_install(tmp_path, f"{known},{typo}")
    assert done.returncode == 2, done.stderr
    assert repr(typo) in done.stderr and all(extra in done.stderr for extra in EXTRAS)
    assert calls == []


def test_an_empty_extra_is_refused(tmp_path: Path) -> None:
    first, second = random.sample(EXTRAS, 2)
    done, calls = run_install(tmp_path, f"{first},,{second}")
    assert done.returncode == 2 and "''" in done.stderr and calls == []


def test_declared_extras_are_installed_as_given(tmp_path: Path) -> None:
    """Every extra but te, which install.sh keeps when it imports and refuses otherwise (test_install_script_offline)."""
    installable = [extra for extra in EXTRAS if extra != "te"]
    chosen = ",".join(random.sample(installable, random.randint(1, len(installable))))
    done, calls = run_install(tmp_path, chosen)
    assert done.returncode == 0, done.stderr
    assert calls[-1].split()[-2:] == ["-e", f".[{chosen}]"]
