"""Re-running CPU test modules with ``TRITON_INTERPRET=1``, so the Triton kernels they reach run instead of the eager
code (how CPU machines test the kernels)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
"""True inside such a re-run: the re-running test skips itself there."""

skip_when_interpreting = pytest.mark.skipif(INTERPRETING, reason="already interpreting")


def assert_pass_in_the_interpreter(*test_files: str | Path) -> None:
    """Run the non-GPU tests of ``test_files`` in a pytest subprocess with ``TRITON_INTERPRET=1``; they must pass."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not gpu",
                           *map(str, test_files)],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=Path(__file__).parents[2],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
