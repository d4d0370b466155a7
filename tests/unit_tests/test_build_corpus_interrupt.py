"""``tools/build_corpus.py`` stopped mid-build by SIGTERM (``kill``, ``scancel``, the acceptance script's interrupt),
SIGHUP (a closed terminal) or SIGINT (Ctrl-C): the hidden ``.PREFIX.partial-PID.*`` files are removed, a corpus
already at the prefix is left byte for byte, and the tool ends with one ``error: interrupted ...`` line and status
128 + the signal. SIGTERM and SIGHUP left the partial ``.bin`` behind; SIGINT printed a traceback."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit_tests.build_corpus_helpers import ROOT, SCRIPT, SUFFIXES

BIG_BUILD_MB = "200"  # the whole standard library: seconds of tokenizing after the partial .bin appears


def partial_files(folder: Path) -> list[Path]:
    """The hidden files of a build in progress in ``folder``."""
    return sorted(folder.glob(".*.partial-*"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda signum: signum.name)
def test_a_signal_mid_build_removes_the_partial_files_and_keeps_the_earlier_corpus(tmp_path: Path,
                                                                                   signum: signal.Signals) -> None:
    prefix = tmp_path / "corpus" / "text"
    prefix.parent.mkdir()
    earlier = {suffix: random.randbytes(random.randint(1, 4096)) for suffix in SUFFIXES}  # what --overwrite would replace
    for suffix, content in earlier.items():
        Path(f"{prefix}{suffix}").write_bytes(content)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    build = subprocess.Popen([sys.executable, str(SCRIPT), "--output-prefix", str(prefix), "--max-mb", BIG_BUILD_MB,
                              "--overwrite"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not partial_files(prefix.parent) and build.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert partial_files(prefix.parent), "no partial file appeared"
        build.send_signal(signum)
        stdout, stderr = build.communicate(timeout=120)
    finally:
        if build.poll() is None:
            build.kill()
            build.communicate()
    assert build.returncode == 128 + signum, stdout + stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith(f"error: interrupted by {signum.name}"), stderr
    assert partial_files(prefix.parent) == []
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"text{suffix}" for suffix in SUFFIXES]
    assert {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in SUFFIXES} == earlier
