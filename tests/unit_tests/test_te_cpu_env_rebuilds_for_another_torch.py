"""``tools/te_cpu_env.sh`` rerun on its virtual environment: the compiled ``transformer_engine_torch`` is rebuilt
where it was built for another torch, not only for another TE_VERSION. A rerun with another TORCH_VERSION installed
that torch and kept the extension compiled against the old one (it then fails to load).

The environment is a stand-in: its ``python`` records the pip calls and keeps the installed torch and extension
versions in files (nothing is installed, downloaded or compiled), and ends the run where the script goes on to the
NVIDIA libraries (status 9). ``pip``, ``pip3`` and ``python3`` outside it fail, so nothing reaches a real pip.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "te_cpu_env.sh"

FAKE_VENV_PYTHON = """#!/usr/bin/env bash
if [ "$1 $2" = "-m pip" ]; then
  echo "pip ${*:3}" >> "$FAKE_LOG"
  previous=""
  for arg in "${@:3}"; do
    case "$arg" in
      torch==*) echo "${arg#torch==}" > "$FAKE_STATE/torch" ;;
      */transformer_engine_torch-*) echo "${arg##*-}" > "$FAKE_STATE/extension" ;;
      transformer_engine_torch==*)  # pip download: the sdist archive the script unpacks
        name="transformer_engine_torch-${arg#*==}"
        mkdir -p "$FAKE_STATE/$name"
        tar -czf "$folder/$name.tar.gz" -C "$FAKE_STATE" "$name" ;;
    esac
    [ "$previous" != -d ] || folder=$arg
    previous=$arg
  done
  exit 0
fi
case "$*" in
  -) cat > /dev/null ;;  # the check that torch is a CUDA 13 build
  *'"transformer_engine_torch"'*) cat "$FAKE_STATE/extension" ;;
  *'"torch"'*) cat "$FAKE_STATE/torch" ;;
  *'import nvidia'*) exit 9 ;;  # past the extension: the NVIDIA libraries, install.sh and the tests
  *) echo "unexpected: python $*" >&2; exit 97 ;;
esac
"""


def _environment(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A stand-in virtual environment made by an earlier run (``bin/python``, an ``activate`` putting it first on
    PATH) and the variables to run the script with (no TE_PYTHON: the environment keeps its own Python)."""
    venv, state, outside = tmp_path / "venv", tmp_path / "state", tmp_path / "outside"
    (venv / "bin").mkdir(parents=True)
    state.mkdir()
    outside.mkdir()
    (venv / "bin" / "python").write_text(FAKE_VENV_PYTHON)
    (venv / "bin" / "activate").write_text(f'export PATH="{venv / "bin"}:$PATH"\n')
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for name in ("pip", "pip3", "python3"):
        (outside / name).write_text("#!/bin/sh\necho \"outside the environment: $0 $*\" >&2\nexit 98\n")
        (outside / name).chmod(0o755)
    (venv / "bin" / "python").chmod(0o755)
    environment = {key: value for key, value in os.environ.items() if key not in {"TE_PYTHON", "VIRTUAL_ENV"}}
    environment.update(PATH=f"{outside}{os.pathsep}/usr/bin{os.pathsep}/bin", FAKE_LOG=str(tmp_path / "log"),
                       FAKE_STATE=str(state))
    return venv, environment


def _run(venv: Path, environment: dict[str, str], torch: str, te: str) -> list[str]:
    """The script on ``venv`` with TORCH_VERSION ``torch`` and TE_VERSION ``te``; the pip calls it made."""
    log = Path(environment["FAKE_LOG"])
    log.write_text("")
    done = subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True, timeout=60,
                          env={**environment, "TORCH_VERSION": torch, "TE_VERSION": te}, check=False)
    assert done.returncode == 9, done.stderr
    return log.read_text().splitlines()


def _builds(calls: list[str]) -> list[str]:
    """The pip calls that install the extension from its unpacked sdist."""
    return [call for call in calls if "/te-sdist/transformer_engine_torch-" in call]


def test_another_torch_rebuilds_the_extension_and_the_same_one_does_not(tmp_path: Path) -> None:
    venv, environment = _environment(tmp_path)
    te = f"2.{random.randint(10, 30)}.{random.randint(0, 9)}"
    first, second = random.sample([f"2.{minor}.{patch}" for minor in range(9, 14) for patch in range(3)], 2)
    assert len(_builds(_run(venv, environment, first, te))) == 1
    assert _builds(_run(venv, environment, first, te)) == []
    calls = _run(venv, environment, second, te)
    assert f"pip install -q numpy<2.4 torch=={second} setuptools wheel pybind11 ninja" in calls
    assert len(_builds(calls)) == 1, calls
    assert _builds(_run(venv, environment, second, te)) == []
    assert (venv / "te-torch-version").read_text() == f"{second}\n"


def test_an_extension_of_an_earlier_run_without_a_record_is_rebuilt_once(tmp_path: Path) -> None:
    """An environment an earlier version of the script made records no torch: it cannot tell which one the extension
    was built for, so it builds it once more."""
    venv, environment = _environment(tmp_path)
    te, torch = f"2.{random.randint(10, 30)}.0", f"2.{random.randint(9, 13)}.0"
    (Path(environment["FAKE_STATE"]) / "extension").write_text(f"{te}\n")
    assert len(_builds(_run(venv, environment, torch, te))) == 1
    assert _builds(_run(venv, environment, torch, te)) == []
