"""``oellm bench`` without a GPU (a login node) is refused before megatron-core, fla and transformers are imported:
the refusal took 10-16 s and half a GB of memory, all of it for the "needs a CUDA GPU" line. Each case runs in a
fresh interpreter, so modules an earlier test imported cannot hide an import."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("megatron.core", "fla", "transformers", "transformer_engine")
"""Modules whose import is the cost of building our sides' TransformerConfig and the models."""

SCRIPT = f"""
import json, sys
import torch
torch.cuda.is_available = lambda: False  # a login node, also where the test machine has a GPU
from megatron.oellm.cli import main
status = main(sys.argv[1:])
print(json.dumps(dict(status=status, loaded=[m for m in {HEAVY!r} if m in sys.modules])))
"""


def bench_without_cuda(*argv: str) -> tuple[dict, str]:
    """Exit status and heavy modules loaded of ``oellm bench ARGV`` in a fresh interpreter with CUDA unavailable, and
    its stderr."""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", SCRIPT, "bench", *argv], capture_output=True, text=True, env=env,
                          cwd=root, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("argv", [[], ["--sides", "ours,hf", "--mbs", "1,2"], ["--plain-ours"], ["--gpu", "h100-sxm"],
                                  ["--peak-tflops", "312"], ["--sides", "hf"]])
def test_no_cuda_is_refused_before_the_heavy_imports(argv: list[str]) -> None:
    result, err = bench_without_cuda("--seq-length", str(random.choice([1024, 2048, 4096])), *argv)
    assert result == {"status": 2, "loaded": []}
    assert err.strip().splitlines()[-1].startswith("oellm bench: error: needs a CUDA GPU")


@pytest.mark.parametrize(("argv", "named"), [
    (["--model", "qwen3-30b-a3b-proxy-2L"], "qwen3.5-35b-a3b flavour"),
    (["--model", "qwen3.5-35b-a3b-tiny", "--seq-length", "4096"], "--seq-length 4096"),
    (["--output", "{plain}/r.json"], "--output"),
])
def test_the_cheap_argument_checks_still_come_first(argv: list[str], named: str, tmp_path: Path) -> None:
    """A bad card, sequence length or ``--output`` (under a file where a folder should be) is named without a GPU,
    as before the CUDA check moved."""
    (tmp_path / "plain").write_text("a file where a folder should be")
    result, err = bench_without_cuda(*(arg.format(plain=tmp_path / "plain") for arg in argv))
    assert result == {"status": 2, "loaded": []}
    assert named in err and "needs a CUDA GPU" not in err
