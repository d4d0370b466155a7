"""Helpers of the ``tools/gpu_acceptance.sh`` tests, which run the script without a GPU: a stand-in ``python3`` that
records where and how it is called, and a stand-in ``nvidia-smi`` that gives the GPU's memory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root, where the script runs its stages from."""
SCRIPT = ROOT / "tools" / "gpu_acceptance.sh"
"""The script under test."""
FAKE_PYTHON3 = """#!/usr/bin/env bash
echo "$PWD|$*" >> "$FAKE_LOG"
[[ $1 == -c ]] && echo "CUDA devices: ${FAKE_CUDA_DEVICES:-1}"
[[ "$*" == *" -m gpu "* ]] && echo "${FAKE_PYTEST_RESULT:-3 passed in 0.12s}"
[[ "$*" == *" recipe "* ]] && printf '%b' "${FAKE_RUN_OUTPUT:-}"
[[ "$*" == *" bench "* ]] && exit "${FAKE_BENCH_RC:-0}"
exit 0
"""
"""A ``python3`` that records its folder and arguments, sees ``$FAKE_CUDA_DEVICES`` CUDA devices (default one: a GPU
machine), ends each pytest with ``$FAKE_PYTEST_RESULT`` (default three passed), prints ``$FAKE_RUN_OUTPUT`` for a
recipe run and exits ``$FAKE_BENCH_RC`` for ``oellm bench``."""
LOADED_CHECKPOINT = " > successfully loaded checkpoint from /x [ t 1/1, p 1/1 ] at iteration 6\\n"
"""Megatron's line of a resume that loaded its checkpoint, as ``printf '%b'`` reads it: the stand-in's default run
output, as the train and resume stages fail a resume without it."""


def run_acceptance(tmp_path: Path, out_dir: Path, stages: str, run_output: str = LOADED_CHECKPOINT,
                   bench_rc: int = 0, fake_python3: str = FAKE_PYTHON3, environment: dict[str, str] | None = None,
                   bench_mbs: str | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The script from ``tmp_path`` (not the repository root) with the stand-in python3 ``fake_python3``, whose
    recipe runs print ``run_output`` and whose ``oellm bench`` exits ``bench_rc``, and ``environment`` over the
    default one (OELLM_WORK, OELLM_KERNEL_CACHE in ``tmp_path``); ``bench_mbs``, when given, is the third argument.
    Returns the calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(fake_python3)
    (bin_dir / "python3").chmod(0o755)
    log = tmp_path / "python3.log"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log),
           "OELLM_KERNEL_CACHE": str(tmp_path / "cache"), "OELLM_WORK": str(tmp_path / "work"),
           "FAKE_RUN_OUTPUT": run_output, "FAKE_BENCH_RC": str(bench_rc), **(environment or {})}
    args = [str(out_dir), stages, *([bench_mbs] if bench_mbs is not None else [])]
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    return done, log.read_text().splitlines() if log.exists() else []


def fake_nvidia_smi(tmp_path: Path, total_mib: int) -> None:
    """An ``nvidia-smi`` on the script's PATH that reports ``total_mib`` as GPU 0's memory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/usr/bin/env bash\necho {total_mib}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
