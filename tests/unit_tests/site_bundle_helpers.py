"""Helpers of the ``tools/build_site_bundle.sh`` tests: the script run against a stand-in ``python3`` whose pip records
what it is asked for and writes one small wheel instead of downloading."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

BUNDLE_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "build_site_bundle.sh"
"""The script under test."""

FAKE_PYTHON3 = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "$*" >> "$FAKE_LOG"
  if [[ " $* " == *" --python-version 3.11 "* && " $* " == *" megatron-core=="* &&
        " $* " != *" --ignore-requires-python "* ]]; then
    echo "ERROR: Ignored the following versions that require a different python version: 0.19.2" >&2; exit 1
  fi
  while [ $# -gt 0 ]; do [ "$1" = "-d" ] && WHEELS="$2"; shift; done
  exec REAL_PYTHON -c "import sys, zipfile; wheel = zipfile.ZipFile(sys.argv[1], 'w'); \\
wheel.writestr('stand_in.py', ''); \\
wheel.writestr('stand_in-1.0.dist-info/METADATA', 'Name: stand-in\\nRequires-Dist: einops>=0.8\\n')" \\
    "$WHEELS/stand_in-1.0-py3-none-any.whl"
fi
exec REAL_PYTHON "$@"
"""
"""A ``python3`` whose ``-m pip download`` records its arguments, refuses megatron-core for Python 3.11 without
``--ignore-requires-python`` as pip does, and writes one small wheel; anything else runs the real Python."""


def run_bundle(tmp_path: Path, *args: str, out: Path | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The script with ``args`` and ``--out out`` (default ``tmp_path/out``); returns the process and the platforms
    pip was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON3.replace("REAL_PYTHON", shlex.quote(sys.executable)))
    (bin_dir / "python3").chmod(0o755)
    log = tmp_path / "pip.log"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log)}
    done = subprocess.run(
        ["bash", str(BUNDLE_SCRIPT), *args, "--out", str(out or tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    words = log.read_text().split() if log.exists() else []
    platforms = [w.split("=", 1)[1] for w in words if w.startswith("--platform=")]
    platforms += [words[i + 1] for i, w in enumerate(words) if w == "--platform"]
    return done, platforms
