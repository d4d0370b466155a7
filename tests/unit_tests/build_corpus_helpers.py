"""Helpers of the ``tools/build_corpus.py`` tests: where the tool is and the files a corpus is made of."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root, which the tool's runs get on ``PYTHONPATH``."""
SCRIPT = ROOT / "tools" / "build_corpus.py"
"""The tool under test."""
SUFFIXES = (".bin", ".idx", ".json")
"""The files of one corpus: ``PREFIX.bin``, ``PREFIX.idx`` and ``PREFIX.json``."""


def run_tool(prefix: Path | str, *args: str) -> subprocess.CompletedProcess:
    """The tool with ``--output-prefix prefix`` and ``args``, this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(SCRIPT), "--output-prefix", str(prefix), *args], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
