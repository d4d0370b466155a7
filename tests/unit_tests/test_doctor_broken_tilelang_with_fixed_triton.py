"""``oellm doctor`` on Hopper with Triton >= 3.7.1 and a tilelang that is installed but does not import: an error.

fla 0.6.0 turns its TileLang backend on on Hopper for any Triton from 3.4 on, not only for fla issue 640's range, and
its dispatch checks only that tilelang is findable; the GDN backward then crashes importing it. The rule said ok.
"""

from __future__ import annotations

import importlib.util
import random
import string
from pathlib import Path

import pytest

from megatron.oellm.doctor.rules import check_fla_hopper_triton
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
    assert "tilelang==0.1.15" in finding.fix and "FLA_TILELANG=0" in finding.fix


@pytest.mark.parametrize("case", ["FLA_TILELANG=0", "FLA_DISABLE_BACKEND_DISPATCH=1", "no nvcc", "Triton before 3.4"])
def test_where_fla_would_not_take_tilelang_it_stays_ok(case):
    triton = f"3.{random.randint(0, 3)}.{random.randint(0, 9)}" if case == "Triton before 3.4" else _fixed_triton()
    report, _ = _broken(triton, **({"nvcc_path": None} if case == "no nvcc" else {}))
    env = dict([case.split("=")]) if "=" in case else {}
    (finding,) = check_fla_hopper_triton(report, env)
    assert finding.severity == "ok", (case, finding)


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
