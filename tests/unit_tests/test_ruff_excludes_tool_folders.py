"""``ruff check .`` (``tools/test.sh``) skipped the folders the tools make (the unpacked site bundle in .bundle/, the
Transformer Engine venv) only through .gitignore, which ruff reads only in a git checkout: in a copy without .git
(rsynced or tarred to a cluster) it linted the unpacked bundle, about 13,900 errors. ruff.toml excludes them itself.
Run on a copy of ruff.toml in a folder without .git, with one lint error in each such folder and one outside."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (".bundle/site-cp312/z3", ".bundle/wheels-cp312", ".bundle_new/site-cp312", ".te-venv/bin",
           "build/lib/megatron/oellm")
"""Folders of Python under the ignored build folders: the site bundle's (new and old name), the TE venv, setuptools'."""


def test_the_tools_build_folders_are_not_linted_without_git(tmp_path: Path) -> None:
    pytest.importorskip("ruff")
    shutil.copy(ROOT / "ruff.toml", tmp_path / "ruff.toml")
    name = f"unused_{random.randbytes(4).hex()}.py"
    for folder in (*FOLDERS, "megatron/oellm"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / name).write_text("import os\n")  # F401
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    flagged = [line.split(":", 1)[0] for line in done.stdout.splitlines() if ": F401 " in line]
    assert flagged == [f"megatron/oellm/{name}"], done.stdout + done.stderr
