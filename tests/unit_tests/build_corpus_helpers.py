"""Helpers of the ``tools/build_corpus.py`` tests: where the tool is and the files a corpus is made of."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root, which the tool's runs get on ``PYTHONPATH``."""
SCRIPT = ROOT / "tools" / "build_corpus.py"
"""The tool under test."""
SUFFIXES = (".bin", ".idx", ".json")
"""The files of one corpus: ``PREFIX.bin``, ``PREFIX.idx`` and ``PREFIX.json``."""
