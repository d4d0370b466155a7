"""``oellm doctor`` on Hopper with Triton >= 3.7.1 and a tilelang that is installed but does not import: an error.

fla 0.6.0 imports a tilelang it finds wherever an nvcc is usable as its kernels import, with any Triton and whatever
FLA_TILELANG or FLA_DISABLE_BACKEND_DISPATCH say; the GDN kernels then fail to import. The rule said ok, then told the
user to set FLA_TILELANG=0, and said ok again once it was set.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import string
from pathlib import Path

import pytest

from megatron.oellm.doctor.report import format_text
from megatron.oellm.doctor.rules import check_environment, check_fla_hopper_triton
from tests.unit_tests.doctor_reports import make_report

NVCC = "/usr/local/cuda/bin/nvcc"


def _fixed_triton() -> str:
    """A Triton release outside fla issue 640's range on the high side (>= 3.7.1)."""
    return random.choice([f"3.7.{random.randint(1, 9)}", f"3.{random.randint(8, 20)}.{random.randint(0, 9)}"])


def _broken(triton: str, **changes):
    """A Hopper report with ``triton`` and a tilelang that fails to import with a fresh error."""
    error = f"ModuleNotFoundError: No module named 'ml_dtypes' ({''.join(random.choices(string.ascii_lowercase, k=8))})"
    fields = {"tilelang_importable": True, "tilelang_import_error": error, "nvcc_path": NVCC, **changes}
    return make_report(versions={"triton": triton, "tilelang": "0.1.15"}, **fields), error


def test_a_broken_tilelang_fla_takes_on_hopper_is_an_error_with_a_fixed_triton():
    triton = _fixed_triton()
    report, error = _broken(triton)
    (finding,) = check_fla_hopper_triton(report, {})
    assert finding.severity == "error", finding
    assert error in finding.message and f"Triton {triton}" in finding.message
    assert "tilelang==0.1.15" in finding.fix and "pip uninstall tilelang" in finding.fix
    assert "set FLA_TILELANG=0" not in finding.fix


@pytest.mark.parametrize("case", ["FLA_TILELANG=0", "FLA_DISABLE_BACKEND_DISPATCH=1", "Triton before 3.4"])
def test_the_switches_and_an_older_triton_do_not_make_it_ok(case):
    """fla imports tilelang whatever its switches say and with any Triton, wherever an nvcc is found."""
    triton = f"3.{random.randint(0, 3)}.{random.randint(0, 9)}" if case == "Triton before 3.4" else _fixed_triton()
    report, error = _broken(triton)
    env = dict([case.split("=")]) if "=" in case else {}
    (finding,) = check_fla_hopper_triton(report, env)
    assert finding.severity == "error", (case, finding)
    assert error in finding.message and "does not help" in finding.fix


@pytest.mark.parametrize("triton_range", ["fixed", "before 3.4"])
@pytest.mark.parametrize("failure", ["missing module", "missing library"])
def test_the_text_report_gives_the_fix_once(triton_range, failure):
    """fla's kernels fail to import (fla-gdn-imports) and fla's TileLang path is broken (fla-hopper-triton) for the
    same tilelang: two findings, each with its own message, and one fix, which the report printed under both."""
    token = "".join(random.choices(string.ascii_lowercase, k=8))
    triton = _fixed_triton() if triton_range == "fixed" else f"3.{random.randint(0, 3)}.{random.randint(0, 9)}"
    library = {"tilelang_import_error": f"OSError: libz3.so.4.{random.randint(16, 99)}: cannot open shared object "
                                       f"file ({token})"} if failure == "missing library" else {}
    report, _ = _broken(triton, **library)
    report = dataclasses.replace(report, fla_gdn_import_error=report.tilelang_import_error)  # fla imports tilelang
    findings = {finding.name: finding for finding in check_environment(report, {})}
    gdn, hopper = findings["fla-gdn-imports"], findings["fla-hopper-triton"]
    assert gdn.severity == hopper.severity == "error" and gdn.fix == hopper.fix and gdn.message != hopper.message
    text = format_text(report, list(findings.values()))
    assert text.count(gdn.fix) == 1 and gdn.message in text and hopper.message in text
    assert text.count("pip uninstall tilelang") == 1
    assert "fix: the same as for fla-gdn-imports above" in text.split(hopper.message, 1)[1].splitlines()[1]


def test_without_nvcc_fla_does_not_import_tilelang_and_it_stays_ok():
    report, _ = _broken(_fixed_triton(), nvcc_path=None)
    (finding,) = check_fla_hopper_triton(report, {})
    assert finding.severity == "ok", finding


def test_the_installed_fla_enables_tilelang_on_hopper_from_triton_3_4():
    """The rule's premise, read from the installed fla: TileLang on by default on Hopper for Triton >= 3.4."""
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        pytest.skip("fla is not installed here")
    backend = Path(spec.origin).parent / "ops" / "common" / "backends" / "tilelang" / "__init__.py"
    text = backend.read_text()
    assert "default_enable = IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0" in text
    env_text = (Path(spec.origin).parent / "utils" / "env.py").read_text()
    assert 'TRITON_ABOVE_3_4_0 = package_version.parse(triton.__version__) >= package_version.parse("3.4.0")' in env_text
