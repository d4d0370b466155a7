"""A signal that reaches ``tools/build_corpus.py`` while the finished corpus is renamed into place takes effect once
the corpus is whole; the tool's line then says the new corpus is in place (it said that no partial corpus was left and
the earlier one was kept, while the new one had replaced it)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit_tests.build_corpus_helpers import ROOT, SCRIPT, SUFFIXES

SIGNAL_DURING_FIRST_RENAME = """
import os, runpy, signal, sys
SIGNAL = getattr(signal, sys.argv[1])
real_replace = os.replace
def replace_after_a_signal(source, target):
    if not getattr(replace_after_a_signal, "sent", False):
        replace_after_a_signal.sent = True
        os.kill(os.getpid(), SIGNAL)
    return real_replace(source, target)
os.replace = replace_after_a_signal
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
"""Runs the tool with ``os.replace`` sending the signal ``argv[1]`` to the process at its first call (the first of the
finished files' renames)."""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda signum: signum.name)
def test_a_signal_during_the_renames_says_the_new_corpus_is_in_place(tmp_path: Path, signum: signal.Signals) -> None:
    prefix = tmp_path / "text"
    for suffix in SUFFIXES:  # an earlier corpus that --overwrite replaces
        Path(f"{prefix}{suffix}").write_bytes(random.randbytes(random.randint(1, 4096)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", SIGNAL_DURING_FIRST_RENAME, signum.name, str(SCRIPT),
                           "--output-prefix", str(prefix), "--max-mb", "0.2", "--overwrite"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 128 + signum, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: interrupted by {signum.name} once the new corpus was complete at {prefix}: it is in place, but its "
        "summary was not printed")
    summary = Path(f"{prefix}.json").read_text()
    assert '"documents"' in summary and Path(f"{prefix}.bin").stat().st_size > 4096
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"text{suffix}" for suffix in SUFFIXES)
