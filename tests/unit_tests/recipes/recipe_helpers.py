"""Helpers of the recipe tests: the example configs, the rows that resolve, a fake ``sbatch``. A module of its own
name, not ``conftest``: ``from conftest import ...`` reads whichever directory's conftest pytest loaded last, so it
breaks when these tests are collected after another directory's (``pytest tests/unit_tests/recipes
tests/unit_tests/convert``, a shuffled order)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "oellm"
CONFIGS = sorted(p for p in EXAMPLES.glob("*.toml") if not p.name.startswith("_"))
REFUSED_ROWS = {"oellm_ckda_hybrid_mn5": (1, 2)}
"""Shipped rows ``oellm recipe`` refuses (config stem -> 1-based rows): the report's document-masked CKDA rows, since
document masking is not wired in this release."""

TABLE_COMMAND_PREFIX = "table of the jobs' logs once they have run: "
"""The lead-in of the line where ``oellm recipe`` prints the ``oellm table`` command of the rows it ran or queued."""


def runnable_rows(config: Path, recipe) -> list:
    """The rows of ``recipe`` (loaded from ``config``) that resolve: all but its :data:`REFUSED_ROWS`."""
    refused = REFUSED_ROWS.get(config.stem, ())
    return [row for number, row in enumerate(recipe.rows, start=1) if number not in refused]


SBATCH_TEST_ONLY = """if [ "$1" = --test-only ]; then
  cat > /dev/null
  echo "sbatch: Job 1 to start at 2026-01-01T00:00:00 using 4 processors on nodes node1 in partition p" >&2
  exit 0
fi
"""
"""Shell lines of a fake ``sbatch`` that answer ``--test-only`` (the script on standard input) as SLURM does for a job
it would queue: a line on stderr, status 0, nothing queued or recorded."""


def fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: str, *, options_exported: bool = True) -> Path:
    """An ``sbatch`` first on PATH that accepts every ``--test-only`` check (:data:`SBATCH_TEST_ONLY`), appends each
    script path it is given to the returned record file and prints ``reply`` (a shell string: ``$1`` is the script).
    With ``options_exported``, the environment has ``SBATCH_ACCOUNT``, ``SBATCH_QOS`` and ``SBATCH_PARTITION``, as
    for a user who exports them: ``--submit`` then finds the options a cluster requires given."""
    record = tmp_path / "submitted"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n{SBATCH_TEST_ONLY}echo "$1" >> "{record}"\necho "{reply}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    for variable in ("SBATCH_ACCOUNT", "SBATCH_QOS", "SBATCH_PARTITION"):
        if options_exported:
            monkeypatch.setenv(variable, f"exported-{variable.removeprefix('SBATCH_').lower()}")
        else:
            monkeypatch.delenv(variable, raising=False)
    return record


def fake_local_launch(monkeypatch: pytest.MonkeyPatch, fake_run: Callable[..., Any]) -> None:
    """Make ``oellm recipe --local``'s torchrun launch call ``fake_run(command, env=env, check=False)`` (the call of
    ``subprocess.run`` it stands in for) and return the ``returncode`` of what that returns, so a test sees the
    command and environment, and no torchrun starts."""
    import megatron.oellm.commands.recipe as recipe_command

    def launch(command: list[str], env: dict[str, str] | None = None) -> int:
        return fake_run(command, env=env, check=False).returncode

    monkeypatch.setattr(recipe_command, "run_forwarding_signals", launch)
