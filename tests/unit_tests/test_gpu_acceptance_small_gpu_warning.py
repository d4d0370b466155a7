"""``tools/gpu_acceptance.sh`` warns when the tests stage shares a GPU under 100 GiB with another stage: on an 80 GB
H100 the parity tests ran out of memory beside the interrupt stage (session 48). A stand-in ``nvidia-smi`` gives the
GPU's memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_gpu_acceptance_script import run_acceptance


def _fake_nvidia_smi(tmp_path: Path, total_mib: int) -> None:
    """An ``nvidia-smi`` on the script's PATH that reports ``total_mib`` as GPU 0's memory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/usr/bin/env bash\necho {total_mib}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)


@pytest.mark.parametrize("stages", ["tests,interrupt", "train,tests"])
def test_tests_beside_another_stage_on_an_80gb_gpu_is_warned(tmp_path: Path, stages: str) -> None:
    total_mib = random.randint(40_000, 100_000)
    _fake_nvidia_smi(tmp_path, total_mib)
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    assert done.returncode == 0, done.stderr
    warning = f"warning: stages {stages} side by side on a GPU of {total_mib} MiB"
    assert warning in done.stderr
    assert warning in (tmp_path / "out" / "summary.txt").read_text()


@pytest.mark.parametrize(("stages", "total_mib"), [("tests", 81_559), ("train,interrupt", 81_559),
                                                   ("tests,interrupt", 143_771)])
def test_no_warning_alone_without_tests_or_on_a_large_gpu(tmp_path: Path, stages: str, total_mib: int) -> None:
    _fake_nvidia_smi(tmp_path, total_mib)
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    assert done.returncode == 0, done.stderr
    assert "side by side on a GPU of" not in done.stderr
    assert "side by side on a GPU of" not in (tmp_path / "out" / "summary.txt").read_text()
