"""``tools/gpu_acceptance.sh`` warns when the tests stage shares a GPU under 100 GiB with another stage: on an 80 GB
H100 the parity tests ran out of memory beside the interrupt stage (session 48). A stand-in ``nvidia-smi`` gives the
GPU's memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.gpu_acceptance_helpers import fake_nvidia_smi, run_acceptance


@pytest.mark.parametrize("stages", ["tests,interrupt", "train,tests"])
def test_tests_beside_another_stage_on_an_80gb_gpu_is_warned(tmp_path: Path, stages: str) -> None:
    total_mib = random.randint(40_000, 100_000)
    fake_nvidia_smi(tmp_path, total_mib)
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    assert done.returncode == 0, done.stderr
    warning = f"warning: stages {stages} side by side on a GPU of {total_mib} MiB"
    assert warning in done.stderr
    assert warning in (tmp_path / "out" / "summary.txt").read_text()


@pytest.mark.parametrize(("stages", "total_mib"), [("tests", 81_559), ("train,interrupt", 81_559),
                                                   ("tests,interrupt", 143_771)])
def test_no_warning_alone_without_tests_or_on_a_large_gpu(tmp_path: Path, stages: str, total_mib: int) -> None:
    fake_nvidia_smi(tmp_path, total_mib)
    done, _calls = run_acceptance(tmp_path, tmp_path / "out", stages)
    assert done.returncode == 0, done.stderr
    assert "side by side on a GPU of" not in done.stderr
    assert "side by side on a GPU of" not in (tmp_path / "out" / "summary.txt").read_text()
