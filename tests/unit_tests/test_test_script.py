"""``tools/test.sh`` (the CI command): lint and tests run with the interpreter ``tools/install.sh`` installed into,
checked with a stand-in ``install.sh`` and stand-in interpreters that record how they are called."""

from __future__ import annotations

import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "test.sh"

RECORDER = """#!/usr/bin/env bash
echo "NAME $*" >> "$FAKE_LOG"
case "$*" in *"--version --version") [ -z "${REAL_PYTHON:-}" ] || exec "$REAL_PYTHON" "$@" ;; esac
"""
"""Records its call; the argument check (pytest's parse, ``--version`` twice) runs in ``REAL_PYTHON`` where set."""


def run_test_script(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """tools/test.sh copied into a stand-in checkout whose install.sh only records, run with ``args`` (default
    ``-k "not gpu"``); returns the process and calls."""
    checkout, bin_dir = tmp_path / "checkout with space", tmp_path / "bin"
    (checkout / "tools").mkdir(parents=True)
    bin_dir.mkdir()
    shutil.copy(SCRIPT, checkout / "tools" / "test.sh")
    (checkout / "tools" / "install.sh").write_text(
        'echo "install.sh $* PYTHON=${PYTHON:-python3}" >> "$FAKE_LOG"\n')
    for name in ("python3", "chosen-python"):
        (bin_dir / name).write_text(RECORDER.replace("NAME", name))
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    environment = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "FAKE_LOG": str(log), **env}
    done = subprocess.run(["bash", str(checkout / "tools" / "test.sh"), *(args or ("-k", "not gpu"))], capture_output=True,
                          text=True, env=environment, timeout=60, check=False)
    return done, log.read_text().splitlines()


@pytest.mark.parametrize("python", [None, "chosen-python"])
def test_lint_and_tests_use_the_interpreter_install_sh_installed_into(tmp_path: Path, python: str | None) -> None:
    done, calls = run_test_script(tmp_path, **({"PYTHON": python} if python else {}))
    assert done.returncode == 0, done.stderr
    expected = python or "python3"
    assert calls == [f"install.sh dev,hf,gdn,plot PYTHON={expected}",
                     f"{expected} -m pytest --noconftest -k not gpu --version --version",
                     f"{expected} -m ruff check .",
                     f"{expected} -m pytest -q tests/unit_tests -k not gpu"]


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_is_printed_before_anything_is_installed(tmp_path: Path, flag: str) -> None:
    """``tools/test.sh --help`` ran the whole install (minutes) before pytest printed its help; it now prints the
    script's usage and exits 0, calling nothing."""
    done, calls = run_test_script(tmp_path, flag)
    assert done.returncode == 0 and "bash tools/test.sh [PYTEST ARGS]" in done.stdout, done.stderr
    assert calls == []


@pytest.mark.parametrize("path", ["tests/unit_tests/test_cards.py", "tests/unit_tests/test_cards.py::test_x",
                                  "tests/unit_tests/recipes", "./tests/unit_tests/recipes"])
def test_a_test_path_narrows_the_run_instead_of_adding_to_the_whole_tree(tmp_path: Path, path: str) -> None:
    """``bash tools/test.sh tests/unit_tests/test_cards.py`` ran the whole tree and the file again; a test path read
    from the repository root now runs alone, with the other arguments."""
    checkout = tmp_path / "checkout with space"
    target = checkout / path.split("::")[0]
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".py":
        target.write_text("def test_x():\n    pass\n")
    else:
        target.mkdir()
    done, calls = run_test_script(tmp_path, "-x", path)
    assert done.returncode == 0, done.stderr
    assert calls[-1] == f"python3 -m pytest -q -x {path}"


@pytest.mark.parametrize("args", [("-k", "nothing"), ("--basetemp", "/tmp"), ("-p", "no:cacheprovider")])
def test_option_values_that_are_no_test_paths_keep_the_whole_tree(tmp_path: Path, args: tuple[str, ...]) -> None:
    done, calls = run_test_script(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert calls[-1] == f"python3 -m pytest -q tests/unit_tests {' '.join(args)}"


@pytest.mark.parametrize("args", [("--{word}",), ("-x", "--{word}=1"), ("--junitxml",), ("-k",)])
def test_arguments_pytest_refuses_stop_the_run_before_the_lint(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``bash tools/test.sh --bogus-option`` ran the install and ``ruff`` (35 s, minutes on a fresh machine) before
    pytest refused the option; pytest's own parser now checks the arguments right after the install."""
    word = "".join(random.choices(string.ascii_lowercase, k=10))
    args = tuple(arg.format(word=word) for arg in args)
    done, calls = run_test_script(tmp_path, *args, REAL_PYTHON=sys.executable)
    assert done.returncode == 4 and "error:" in done.stderr, done.stderr
    assert calls == ["install.sh dev,hf,gdn,plot PYTHON=python3",
                     f"python3 -m pytest --noconftest {' '.join(args)} --version --version"]


def test_arguments_pytest_takes_pass_the_check(tmp_path: Path) -> None:
    """The check's real parse accepts what pytest runs with, test paths and plugin options included."""
    checkout = tmp_path / "checkout with space"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    done, calls = run_test_script(tmp_path, "-x", "-p", "no:cacheprovider", "tests/test_x.py", "-k", "x",
                                  REAL_PYTHON=sys.executable)
    assert done.returncode == 0, done.stderr
    assert [call.split()[:3] for call in calls[1:]] == [["python3", "-m", "pytest"], ["python3", "-m", "ruff"],
                                                        ["python3", "-m", "pytest"]]


def test_no_conftest_adds_an_option_the_check_would_refuse() -> None:
    """The check runs with --noconftest: an option a conftest added would be refused there."""
    tests = Path(__file__).resolve().parents[1]
    assert not [path for path in tests.rglob("conftest.py") if "pytest_addoption" in path.read_text()]
