"""``oellm doctor`` where no Hopper GPU is seen (an image build, a login node): a tilelang that is installed but does
not import is an error there too.

Without a GPU the fla issue 640 rule said "not applicable" before looking at TileLang, so an image whose tilelang
crashed on import passed ``RUN oellm doctor`` at build time and failed only in a queued job on a Hopper node.
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
    """A fresh lowercase word: markers that only this run can have produced."""
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _affected_triton() -> str:
    """A Triton release fla issue 640 affects on Hopper (3.4 <= version < 3.7.1)."""
    return f"3.{random.randint(4, 6)}.{random.randint(0, 9)}"


@pytest.mark.parametrize("gpus", [(), (A100,)], ids=["no-gpu", "no-hopper"])
def test_a_tilelang_that_does_not_import_is_an_error_without_a_hopper_gpu(gpus):
    marker = _word()
    triton = _affected_triton()
    report = make_report(versions={"triton": triton, "tilelang": "0.1.15"}, gpus=gpus, tilelang_importable=True,
                         tilelang_import_error=f"OSError: libz3.so.4.15: {marker}")
    (finding,) = check_fla_hopper_triton(report, {})
    assert finding.severity == "error", finding
    assert marker in finding.message and f"Triton {triton}" in finding.message and "no Hopper GPU" in finding.message
    assert "tilelang==0.1.15" in finding.fix


def _broken_tilelang() -> dict:
    """Report fields of a tilelang that is installed but does not import, with a fresh error."""
    return {"tilelang_importable": True, "tilelang_import_error": f"OSError: {_word()}"}


@pytest.mark.parametrize(
    "case", ["tilelang absent", "tilelang imports", "Triton without the bug", "Triton before the bug", "no fla"])
def test_without_a_hopper_gpu_the_rule_stays_not_applicable_otherwise(case):
    """Only the broken install is reported without a GPU; an absent tilelang there is still not applicable."""
    versions = {"triton": _affected_triton(), "tilelang": "0.1.15"}
    fields = _broken_tilelang()
    if case == "tilelang absent":
        versions["tilelang"], fields = None, {"tilelang_importable": False}
    elif case == "tilelang imports":
        fields = {"tilelang_importable": True}
    elif case == "Triton without the bug":
        versions["triton"] = f"3.{random.randint(8, 20)}.{random.randint(0, 9)}"
    elif case == "Triton before the bug":
        versions["triton"] = f"3.{random.randint(0, 3)}.{random.randint(0, 9)}"
    else:
        versions["fla"] = None
    (finding,) = check_fla_hopper_triton(make_report(versions=versions, gpus=(), **fields), {})
    assert finding.severity == "ok" and "not applicable" in finding.message, (case, finding)
