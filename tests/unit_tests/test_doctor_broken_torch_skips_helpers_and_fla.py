"""``oellm doctor`` where torch does not import (a missing ``libcudnn.so.9``): only the torch rule's error.

The probes of megatron-core's compiled dataset helper and of fla's GDN kernels import torch too, so they failed on the
same missing library and added two more errors whose fixes (rebuild the site bundle, reinstall megatron-core, reinstall
fla) would not help. They are now skipped without an importable torch; and a missing torch or Triton module in fla's
import is fixed as torch is, not with a bare ``pip install triton`` that may replace torch's own build.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.doctor.report import exit_status
from megatron.oellm.doctor.rules import check_environment, check_fla_gdn_imports, check_helpers_cpp
from tests.unit_tests.doctor_reports import make_report

ROOT = Path(__file__).resolve().parents[2]


def _missing_library_error() -> str:
    """An ImportError line for a CUDA library of a fresh random name, as ``import torch`` raises it."""
    name = "lib" + "".join(random.choices(string.ascii_lowercase, k=8)) + f".so.{random.randint(1, 12)}"
    return f"ImportError: {name}: cannot open shared object file: No such file or directory"


@pytest.mark.parametrize("torch_state", ["broken", "absent"])
def test_the_helper_and_fla_rules_say_nothing_without_an_importable_torch(torch_state: str) -> None:
    error = _missing_library_error()
    torch = {"torch_import_error": error} if torch_state == "broken" else {"versions": {"torch": None}}
    report = make_report(**torch, helpers_cpp_import_error=error, fla_gdn_import_error=error,
                         megatron_core_path="/opt/site/megatron/core")
    assert check_helpers_cpp(report, {}) == []
    assert check_fla_gdn_imports(report, {}) == []
    findings = check_environment(report, {})
    assert [finding.name for finding in findings if finding.severity == "error"] == ["torch"]
    assert exit_status(findings) == 1


def test_the_doctor_reports_a_torch_that_fails_to_import_once(tmp_path: Path) -> None:
    """A torch whose import raises, first on the path the doctor and its fresh interpreters see."""
    error = _missing_library_error()
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(f"raise ImportError({error.split(': ', 1)[1]!r})\n")
    pythonpath = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "doctor", "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath}, timeout=600, check=False)
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["findings"]
    errors = [finding for finding in findings if finding["severity"] == "error"]
    assert [finding["name"] for finding in errors] == ["torch"], errors
    assert error.split(": ", 1)[1] in errors[0]["message"]
    names = {finding["name"] for finding in findings}
    assert not names & {"megatron-core-helpers", "fla-gdn-imports"}


@pytest.mark.parametrize("module", ["torch", "triton", "triton.language"])
def test_a_missing_torch_or_triton_in_fla_is_fixed_as_torch_is(module: str) -> None:
    report = make_report(fla_gdn_import_error=f"ModuleNotFoundError: No module named '{module}'",
                         megatron_oellm_checkout=f"/home/{random.randrange(10**6)}/megatron-oellm")
    (finding,) = check_fla_gdn_imports(report, {})
    assert finding.severity == "error" and module in finding.message
    assert "pip install torch" not in finding.fix and "pip install triton" not in finding.fix
    assert "torch finding" in finding.fix and f"bash {report.megatron_oellm_checkout}/tools/install.sh" in finding.fix


def test_another_missing_module_is_still_installed_by_name() -> None:
    package = "".join(random.choices(string.ascii_lowercase, k=10))
    (finding,) = check_fla_gdn_imports(make_report(
        fla_gdn_import_error=f"ModuleNotFoundError: No module named '{package}.sub'"), {})
    assert f"pip install {package}" in finding.fix and "torch finding" not in finding.fix
