"""Exporting a training checkpoint whose stored arguments hold a megatron-core object printed megatron-core's import
warnings (Transformer Engine and Apex absent, absl-py) as five unrelated ``warning:`` lines: unpickling the common
state imports megatron-core. It is read under the filter the conversion's own megatron-core import uses."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

from megatron.core.enums import ModelType

from megatron.oellm.convert.dist_ckpt import save_streaming

ROOT = Path(__file__).resolve().parents[3]


def test_reading_the_stored_arguments_prints_no_import_warnings(tmp_path: Path) -> None:
    directory = tmp_path / "run" / f"iter_{random.randrange(1, 10**6):07d}"
    stored = argparse.Namespace(oellm_model="qwen3-30b-a3b-tiny", model_type=random.choice(list(ModelType)))
    save_streaming(directory, [], {}, dict, {"args": stored})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "convert", "mcore-to-hf", "--model",
                           "qwen3-30b-a3b-tiny", "--mcore", str(directory), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert any("missing tensor" in line for line in lines), lines  # the common state was read
    assert not [line for line in lines if "warning" in line], lines
