"""Shared fixtures of the recipe tests: the example configs, megatron-core's own argument parser, a fake
``sbatch``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from megatron.oellm.megatron_args import megatron_parser

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "oellm"
CONFIGS = sorted(p for p in EXAMPLES.glob("*.toml") if not p.name.startswith("_"))


@pytest.fixture(scope="session")
def parse_megatron():
    """Parse an argv with megatron-core 0.19.2's parser (built once: it is slow to build)."""
    parser = megatron_parser()
    return lambda argv: parser.parse_args(list(argv))


def fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: str) -> Path:
    """An ``sbatch`` first on PATH that appends each script path it is given to the returned record file and prints
    ``reply`` (a shell string: ``$1`` is the script)."""
    record = tmp_path / "submitted"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$1" >> "{record}"\necho "{reply}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return record
