"""``tools/te_cpu_env.sh`` and ``tools/te_site_bundle.sh``: ``--help``, an option and extra arguments are answered
before ``realpath`` sees them (its own help text became the virtual environment's name, created in the current
directory before ~4 GB of downloads, or the VENV_DIR of an error message).

``TE_PYTHON`` is a stand-in that answers the version probes as a Python 3.12, records every other call and fails,
so a run that gets as far as making the virtual environment shows up in its log and stops there (the script then
exits 2, naming the failed ``-m venv``).
"""

from __future__ import annotations

import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"

RECORDER = """#!/usr/bin/env bash
if [ "$1" = -c ]; then echo 3.12; exit 0; fi  # the version probes: a Python 3.12
printf '%s\\n' "$*" >> "$FAKE_LOG"
exit 7
"""


def run_tool(tmp_path: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess, str, list[str]]:
    """``script`` with ``args`` in an empty working folder; returns the process, what TE_PYTHON was asked and what
    the folder holds afterwards."""
    work = tmp_path / "work"
    work.mkdir()
    recorder = tmp_path / "te-python"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    env = {**os.environ, "TE_PYTHON": str(recorder), "FAKE_LOG": str(log)}
    done = subprocess.run(["bash", str(TOOLS / script), *args], cwd=work, capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    return done, log.read_text(), sorted(path.name for path in work.iterdir())


@pytest.mark.parametrize("script", ["te_cpu_env.sh", "te_site_bundle.sh"])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_usage(tmp_path: Path, script: str, flag: str) -> None:
    done, calls, left = run_tool(tmp_path, script, flag)
    assert done.returncode == 0, done.stderr
    assert f"bash tools/{script}" in done.stdout and "realpath" not in done.stdout + done.stderr
    assert calls == "" and left == []


@pytest.mark.parametrize("script", ["te_cpu_env.sh", "te_site_bundle.sh"])
def test_an_unknown_option_is_refused(tmp_path: Path, script: str) -> None:
    option = "--" + "".join(random.choices(string.ascii_lowercase, k=8))
    done, calls, left = run_tool(tmp_path, script, option)
    assert done.returncode == 2 and option in done.stderr and "usage" in done.stderr, done.stderr
    assert "realpath" not in done.stderr and calls == "" and left == []


@pytest.mark.parametrize(("script", "most"), [("te_cpu_env.sh", 1), ("te_site_bundle.sh", 3)])
def test_more_arguments_than_the_usage_names_are_refused(tmp_path: Path, script: str, most: int) -> None:
    words = [f"dir{random.randint(0, 10**6)}-{i}" for i in range(most + 1)]
    done, calls, left = run_tool(tmp_path, script, *words)
    assert done.returncode == 2 and words[-1] in done.stderr and str(most + 1) in done.stderr, done.stderr
    assert calls == "" and left == []


def test_te_cpu_env_still_makes_the_named_environment(tmp_path: Path) -> None:
    """One VENV_DIR goes on to ``TE_PYTHON -m venv`` with its absolute path (the stand-in stops the run there)."""
    name = f"venv-{random.randint(0, 10**6)}"
    done, calls, _ = run_tool(tmp_path, "te_cpu_env.sh", name)
    assert done.returncode == 2 and f"-m venv {tmp_path / 'work' / name} failed" in done.stderr, done.stderr
    assert calls.splitlines() == [f"-m venv {tmp_path / 'work' / name}"]


def test_te_cpu_env_refuses_a_folder_that_is_not_a_virtual_environment(tmp_path: Path) -> None:
    """An existing folder with the user's files is refused before ``venv`` adds bin/, lib/ and pyvenv.cfg to it."""
    folder = tmp_path / "work" / f"data-{random.randint(0, 10**6)}"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(folder)], capture_output=True, text=True,
                          env={**os.environ, "TE_PYTHON": "false"}, timeout=60, check=False)
    assert done.returncode == 2 and str(folder) in done.stderr and "not a virtual environment" in done.stderr
    assert sorted(path.name for path in folder.iterdir()) == ["notes.txt"]


def test_te_cpu_env_refuses_a_file(tmp_path: Path) -> None:
    """A VENV_DIR that is a file is named in one line rather than in venv's traceback."""
    path = tmp_path / f"file-{random.randint(0, 10**6)}"
    path.write_text("x")
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(path)], capture_output=True, text=True,
                          env={**os.environ, "TE_PYTHON": "false"}, timeout=60, check=False)
    assert done.returncode == 2 and f"{path} is a file" in done.stderr, done.stderr


def test_te_cpu_env_takes_an_empty_folder(tmp_path: Path) -> None:
    """An empty folder (made ahead, e.g. on a scratch file system) still goes on to ``venv``."""
    (tmp_path / "work" / "empty").mkdir(parents=True)
    log = tmp_path / "calls.log"
    recorder = tmp_path / "te-python"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), "empty"], cwd=tmp_path / "work", capture_output=True,
                          text=True, env={**os.environ, "TE_PYTHON": str(recorder), "FAKE_LOG": str(log)}, timeout=60,
                          check=False)
    assert done.returncode == 2 and log.read_text().splitlines() == [f"-m venv {tmp_path / 'work' / 'empty'}"]


def _venv_stub(folder: Path) -> None:
    """A virtual environment's shape in ``folder``: ``bin/python`` (a stub) and an ``activate`` that ends the script
    with status 7, where a real one would go on to the downloads."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    (folder / "bin" / "python").chmod(0o755)
    (folder / "bin" / "activate").write_text("exit 7\n")
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")


@pytest.mark.parametrize("form", ["absolute", "relative", "symlink"])
def test_te_cpu_env_takes_an_existing_virtual_environment_again(tmp_path: Path, form: str) -> None:
    """A rerun on the environment an earlier run made goes past the folder check (to its ``activate``), given by
    absolute or relative path or through a symbolic link."""
    venv = tmp_path / "work" / f"venv-{random.randint(0, 10**6)}"
    _venv_stub(venv)
    given = {"absolute": str(venv), "relative": venv.name, "symlink": str(tmp_path / "link")}[form]
    if form == "symlink":
        (tmp_path / "link").symlink_to(venv)
    env = {key: value for key, value in os.environ.items() if key != "TE_PYTHON"}
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), given], cwd=tmp_path / "work", capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 7 and "error" not in done.stderr, done.stderr


def test_te_cpu_env_names_a_virtual_environment_whose_python_is_gone(tmp_path: Path) -> None:
    """An environment whose ``bin/python`` no longer runs (the Python it linked to was removed) is named as one, with
    removing it as the way out, rather than as a folder that is no environment."""
    venv = tmp_path / f"venv-{random.randint(0, 10**6)}"
    _venv_stub(venv)
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to(tmp_path / "removed-python3.12")
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(venv)], capture_output=True, text=True,
                          env={**os.environ, "TE_PYTHON": "false"}, timeout=60, check=False)
    assert done.returncode == 2 and f"{venv} is a virtual environment without a working bin/python" in done.stderr
    assert f"remove {venv} and rerun" in done.stderr


def test_te_cpu_env_names_a_te_python_that_does_not_run_beside_an_existing_environment(tmp_path: Path) -> None:
    """With an existing environment, a TE_PYTHON that fails to run ended in bash's ``have: unbound variable``."""
    venv = tmp_path / f"venv-{random.randint(0, 10**6)}"
    _venv_stub(venv)
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(venv)], capture_output=True, text=True,
                          env={**os.environ, "TE_PYTHON": "false"}, timeout=60, check=False)
    assert done.returncode == 2 and "error: TE_PYTHON=false does not run" in done.stderr, done.stderr
    assert "unbound" not in done.stderr


def test_te_cpu_env_refuses_a_python_that_does_not_run_before_making_anything(tmp_path: Path) -> None:
    """``TE_PYTHON=nosuch``: the venv step failed with bash's ``command not found`` (exit 127)."""
    name = f"python3.{random.randint(20, 99)}-missing"
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(tmp_path / "venv")], capture_output=True,
                          text=True, env={**os.environ, "TE_PYTHON": name}, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr == (f"error: TE_PYTHON={name} does not run; name a Python, e.g. "
                                                    "TE_PYTHON=python3.12\n")
    assert not (tmp_path / "venv").exists()


def test_te_cpu_env_refuses_a_python_older_than_3_11_before_making_anything(tmp_path: Path) -> None:
    """A Python 3.10 made the venv and downloaded ~4 GB before install.sh refused it at the end."""
    old = tmp_path / "python3.10"
    old.write_text('#!/usr/bin/env bash\nif [[ "$2" == *"version_info <"* ]]; then exit 1; fi\necho 3.10\n')
    old.chmod(0o755)
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(tmp_path / "venv")], capture_output=True,
                          text=True, env={**os.environ, "TE_PYTHON": str(old)}, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr == (f"error: TE_PYTHON={old} is Python 3.10; megatron-oellm needs 3.11 "
                                                    "or later\n")
    assert not (tmp_path / "venv").exists()


def test_te_cpu_env_names_a_venv_an_interrupted_run_left_incomplete(tmp_path: Path) -> None:
    """An interrupted first run (or a Python without ensurepip) leaves bin/python without bin/activate; every rerun
    then stopped on bash's ``activate: No such file or directory``. It is named, with what to do."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(Path(sys.executable))
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    done = subprocess.run(["bash", str(TOOLS / "te_cpu_env.sh"), str(venv)], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "TE_PYTHON"}, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {venv} is an incomplete virtual environment (no bin/activate") and \
        f"remove {venv} and rerun" in done.stderr
    assert sorted(path.name for path in (venv / "bin").iterdir()) == ["python"]


@pytest.mark.parametrize(("script", "args", "message"), [
    ("te_cpu_env.sh", [""], "error: VENV_DIR is empty (an unset shell variable?); leave it out for .te-venv"),
    ("te_site_bundle.sh", ["venv", ""], "error: OUT_DIR is empty (an unset shell variable?)"),
    ("te_site_bundle.sh", ["venv", "out", "9" * 12], "error: PART_MIB must be a whole number of MiB from 1 to 9999999"),
])
def test_an_empty_folder_argument_or_a_part_size_beyond_split_is_refused(tmp_path: Path, script: str, args: list[str],
                                                                          message: str) -> None:
    """``bash tools/te_cpu_env.sh "$VENV"`` with VENV unset meant the repository's .te-venv (te_site_bundle.sh's
    OUT_DIR: its .bundle/te-parts), silently; a part size of 12 digits passed the check and failed in split after
    minutes of xz."""
    done, calls, left = run_tool(tmp_path, script, *args)
    assert done.returncode == 2 and done.stderr.startswith(message), done.stderr
    assert calls == "" and left == []


def test_an_empty_out_dir_before_a_part_size_means_the_default_folder(tmp_path: Path) -> None:
    """The arguments are positional: ``VENV "" 30`` is how a part size goes with the default folder, so it reaches
    the next check (the missing venv), not the empty-argument refusal."""
    done, calls, left = run_tool(tmp_path, "te_site_bundle.sh", "venv", "", "30")
    assert done.returncode == 2 and "has no bin/python" in done.stderr, done.stderr
    assert "OUT_DIR is empty" not in done.stderr and calls == "" and left == []
