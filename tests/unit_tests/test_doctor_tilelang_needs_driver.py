"""``oellm doctor`` where no GPU is seen and ``import tilelang`` fails only for want of the NVIDIA driver's library.

A login node, ``apptainer exec`` without ``--nv`` or a docker build host has no ``libcuda`` / ``libnvidia-*``: the
import cannot be judged there, so it is a warning asking for a check on a GPU node; other import failures (a wrong
z3-solver, a missing CUDA runtime wheel) fail on the GPU nodes too and stay errors.
"""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm.doctor.report import GpuInfo
from megatron.oellm.doctor.rules import check_fla_hopper_triton
from tests.unit_tests.doctor_reports import make_report

A100 = GpuInfo(0, "NVIDIA A100-SXM4-80GB", (8, 0), 79.2)


def _word() -> str:
    """A fresh lowercase word: a marker only this run can have produced."""
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _report(error: str, gpus=()):
    """fla with a Triton fla issue 640 affects, and a tilelang that fails to import with ``error``."""
    triton = f"3.{random.randint(4, 6)}.{random.randint(0, 9)}"
    return make_report(versions={"triton": triton, "tilelang": "0.1.15"}, gpus=gpus, tilelang_importable=True,
                       tilelang_import_error=error)


@pytest.mark.parametrize("library", ["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"])
def test_a_missing_driver_library_is_a_warning_without_a_gpu(library):
    error = f"OSError: {library}: cannot open shared object file: No such file or directory ({_word()})"
    (finding,) = check_fla_hopper_triton(_report(error), {})
    assert finding.severity == "warning", finding
    assert error in finding.message and "driver" in finding.message
    assert "GPU node" in finding.fix


@pytest.mark.parametrize("error", [
    "OSError: libz3.so.4.15: cannot open shared object file: No such file or directory",
    "OSError: libcudart.so.13: cannot open shared object file: No such file or directory",
    "ModuleNotFoundError: No module named 'tvm_ffi'",
])
def test_other_import_failures_stay_errors_without_a_gpu(error):
    (finding,) = check_fla_hopper_triton(_report(f"{error} {_word()}"), {})
    assert finding.severity == "error", finding


def test_a_missing_driver_library_where_a_gpu_is_seen_stays_an_error():
    """torch saw a GPU, so the driver is there: tilelang's failure is its own."""
    error = f"OSError: libcuda.so.1: cannot open shared object file ({_word()})"
    (finding,) = check_fla_hopper_triton(_report(error, gpus=(A100,)), {})
    assert finding.severity == "error", finding
