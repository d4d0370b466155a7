"""``oellm doctor``'s fixes on Python 3.11 and on nodes without internet.

They said ``pip install megatron-core==0.19.2``, which pip refuses on 3.11 (its metadata requires >= 3.12;
``tools/install.sh`` passes ``--ignore-requires-python``), named no route for a node without internet, and named the
tools relative to a checkout the user may not be in (``bash tools/install.sh``).
"""

from __future__ import annotations

import random
from pathlib import Path

from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.doctor.rules import check_fla_hopper_triton, check_megatron_core, check_torch
from tests.unit_tests.doctor_reports import make_report

CHECKOUT = Path(__file__).resolve().parents[2]


def _python(minor: int) -> str:
    return f"3.{minor}.{random.randint(0, 12)}"


def test_megatron_core_on_python_311_is_installed_ignoring_its_python_requirement():
    machine = random.choice(["x86_64", "aarch64"])
    report = make_report(versions={"megatron-core": None}, python_version=_python(11), machine=machine,
                         megatron_oellm_checkout=str(CHECKOUT))
    (finding,) = check_megatron_core(report, {})
    assert finding.severity == "error"
    assert f"pip install --ignore-requires-python megatron-core=={MEGATRON_CORE_VERSION}" in finding.fix
    assert f"bash {CHECKOUT}/tools/build_site_bundle.sh --python-version 3.11 --arch {machine}" in finding.fix
    assert "without internet" in finding.fix and "PYTHONPATH" in finding.fix


def test_megatron_core_on_python_312_needs_no_flag_and_a_wrong_release_gets_the_same_routes():
    report = make_report(versions={"megatron-core": f"0.{random.randint(20, 30)}.0"}, python_version=_python(12),
                         megatron_core_path="/opt/Megatron-LM/megatron/core", megatron_oellm_checkout=str(CHECKOUT))
    (finding,) = check_megatron_core(report, {})
    assert finding.severity == "error"
    assert f"pip install megatron-core=={MEGATRON_CORE_VERSION}" in finding.fix
    assert "--ignore-requires-python" not in finding.fix and "--python-version 3.12" in finding.fix
    assert "take it off PYTHONPATH" in finding.fix


def test_tools_are_named_by_absolute_path_from_the_checkout():
    report = make_report(versions={"torch": None}, megatron_oellm_checkout=str(CHECKOUT))
    (finding,) = check_torch(report, {})
    assert f"bash {CHECKOUT}/tools/install.sh" in finding.fix and " bash tools/" not in finding.fix
    (installed,) = check_torch(make_report(versions={"torch": None}), {})
    assert "bash tools/install.sh in a megatron-oellm checkout" in installed.fix


def test_the_tilelang_fix_names_the_site_bundle():
    report = make_report(versions={"triton": "3.5.0"}, megatron_oellm_checkout=str(CHECKOUT), python_version=_python(11))
    (finding,) = check_fla_hopper_triton(report, {})
    assert finding.severity == "error" and "tilelang==0.1.15" in finding.fix
    assert f"{CHECKOUT}/tools/build_site_bundle.sh --python-version 3.11" in finding.fix
