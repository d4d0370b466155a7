"""Helpers of the ``tools/install.sh`` and ``tools/install_needs.py`` tests: the script run against a stand-in Python
whose ``-m pip`` only records its arguments (nothing is installed) and a stand-in ``nvidia-smi``, and what
install_needs.py is and prints for TileLang."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.unit_tests.fake_site import ROOT, complete_site

INSTALL_SCRIPT = ROOT / "tools" / "install.sh"
"""The script under test."""
INSTALL_NEEDS = ROOT / "tools" / "install_needs.py"
"""The tool that prints what install.sh still installs."""
TILELANG_PINS = ["tilelang==0.1.15", "apache-tvm-ffi==0.1.12", "torch-c-dlpack-ext==0.1.5", "z3-solver==4.15.4.0"]
"""The TileLang pins install_needs.py prints for the gdn extra where fla would take its TileLang backward."""

FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "pip $*" >> "$FAKE_LOG"
  if [ -n "${FAKE_PIP_LIVE_TAG:-}" ]; then  # fails after its message reached install.sh's stderr file, or 5 s
    echo "pip message $FAKE_PIP_LIVE_TAG" >&2
    verdict=late
    for _ in $(seq 100); do
      grep -q "pip message $FAKE_PIP_LIVE_TAG" "$FAKE_STDERR_FILE" 2>/dev/null && { verdict=live; break; }
      sleep 0.05
    done
    echo "$verdict" > "$FAKE_PIP_VERDICT"
    exit 1
  fi
  [ -z "${FAKE_PIP_FAILURE:-}" ] || { echo "$FAKE_PIP_FAILURE" >&2; exit 1; }
  for arg in "$@"; do
    case "$arg" in
      torch==*+cpu) [ "${FAKE_LOCAL_CPU_WHEEL:-1}" = 1 ] || case "$*" in *--extra-index-url*) ;; *) exit 1 ;; esac
                    CUDA=None ;;
      torch==*) CUDA="${FAKE_TORCH_CUDA:-None}" ;;
      *) continue ;;
    esac
    mkdir -p "$FAKE_SITE/torch" && printf 'class version:\\n    cuda = %s\\n' "$CUDA" > "$FAKE_SITE/torch/__init__.py"
  done
  exit 0
fi
case "$*" in *megatron.core*) echo "megatron-oellm (stand-in)"; exit 0 ;; esac
PYTHONPATH="$FAKE_SITE${PYTHONPATH:+:$PYTHONPATH}" exec REAL_PYTHON -S "$@"
"""

FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
[ -z "${FAKE_SMI_FAILURE:-}" ] || { echo "$FAKE_SMI_FAILURE"; exit "${FAKE_SMI_STATUS:-9}"; }
[ -n "${FAKE_DRIVER:-}" ] || { echo "NVIDIA-SMI has failed: no driver" >&2; exit 9; }
case "$*" in *compute_cap*) echo "${FAKE_COMPUTE_CAP:-9.0}"; echo "${FAKE_COMPUTE_CAP:-9.0}"; exit 0 ;; esac
echo "$FAKE_DRIVER"; echo "$FAKE_DRIVER"
"""


def run_install(
    tmp_path: Path, *, torch: str | None = None, triton: bool = False, driver: str = "", extras: str = "dev",
    installed: Mapping[str, str] | None = None, extra_site: Path | None = None, stderr_file: Path | None = None,
    **env: str
) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """install.sh against the stand-ins; ``torch`` pre-installs a fake torch ("None" or a CUDA version string),
    ``installed`` (distribution -> version) a complete environment with those distributions
    (:func:`tests.unit_tests.fake_site.complete_site`); ``extra_site`` is copied into the site (more modules);
    ``stderr_file`` takes install.sh's stderr instead of the returned process (the stand-in pip reads it).

    Returns the finished process and the recorded pip argument lists."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    site.mkdir()
    if installed is not None:
        complete_site(site, installed)
    if extra_site is not None:
        shutil.copytree(extra_site, site, dirs_exist_ok=True)
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON.replace("REAL_PYTHON", shlex.quote(sys.executable)))
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    if torch is not None:
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(f"class version:\n    cuda = {torch}\n")
    if triton:
        (site / "triton.py").write_text("")
    log = tmp_path / "pip.log"
    log.touch()
    environment = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path),
        "PYTHON": str(python),
        "FAKE_LOG": str(log),
        "FAKE_SITE": str(site),
        "FAKE_DRIVER": driver,
        **env,
    }
    if stderr_file is None:
        done = subprocess.run(["bash", str(INSTALL_SCRIPT), extras], capture_output=True, text=True, env=environment,
                              timeout=120)
    else:
        with open(stderr_file, "w") as stderr:
            done = subprocess.run(["bash", str(INSTALL_SCRIPT), extras], stdout=subprocess.PIPE, stderr=stderr,
                                  text=True, env={**environment, "FAKE_STDERR_FILE": str(stderr_file)}, timeout=120)
    return done, [line.split()[1:] for line in log.read_text().splitlines()]
