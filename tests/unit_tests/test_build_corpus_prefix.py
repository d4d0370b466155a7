"""``tools/build_corpus.py --output-prefix`` that names no file prefix: ``''`` wrote hidden ``..bin`` / ``..idx``
files into the current folder, ``dir/`` wrote ``dir.bin`` beside the folder instead of in it. Refused, writing
nothing, with an example built from what was given."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit_tests.build_corpus_helpers import ROOT, SCRIPT


@pytest.mark.parametrize("prefix", ["", "corpus/", ".", "..", "corpus/.."])
def test_a_prefix_without_a_file_name_is_refused_and_writes_nothing(prefix, tmp_path):
    work = tmp_path / "work"
    (work / "corpus").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(SCRIPT), "--output-prefix", prefix, "--max-mb", "0.01"], cwd=work,
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 2, done.stderr
    assert f"--output-prefix {prefix!r} names no file prefix; give a folder and a name" in done.stderr
    assert sorted(os.listdir(work)) == ["corpus"] and os.listdir(work / "corpus") == []
    assert sorted(os.listdir(tmp_path)) == ["work"]
