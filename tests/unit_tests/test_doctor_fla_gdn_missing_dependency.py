"""``oellm doctor`` where fla is installed but its GDN kernels do not import (einops missing): an error naming it.

``import fla`` worked, so the doctor passed; ``from fla.ops.gated_delta_rule import chunk_gated_delta_rule`` failed on
the missing einops, megatron-core caught it and said only "FLA is not installed" at model build.
"""

from __future__ import annotations

import importlib.util
import os
import random
import string

import pytest

from megatron.oellm.doctor import probes
from megatron.oellm.doctor.report import exit_status
from megatron.oellm.doctor.rules import check_environment, check_fla_gdn_imports
from tests.unit_tests.doctor_reports import make_report

pytestmark = pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="fla is not installed here")


def test_a_missing_einops_is_an_error_naming_it(tmp_path, monkeypatch):
    """einops shadowed by a module that is not found, as where the container lacks it."""
    (tmp_path / "einops.py").write_text("raise ModuleNotFoundError(\"No module named 'einops'\", name='einops')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    error = probes.fresh_import_facts(None, fla_installed=True).fla_gdn_error
    assert error is not None and "einops" in error, error
    version = f"0.{random.randint(5, 9)}.{random.randint(0, 9)}"
    report = make_report(versions={"fla": version}, fla_gdn_import_error=error)
    (finding,) = check_fla_gdn_imports(report, {})
    assert finding.severity == "error", finding
    assert f"fla {version}" in finding.message and "einops" in finding.message
    assert "FLA is not installed" in finding.message
    assert "pip install einops" in finding.fix and "BUNDLE_REQUIRES.txt" in finding.fix
    assert exit_status(check_environment(report, {})) == 1


def test_another_import_failure_is_an_error_with_the_reinstall_fix():
    marker = "".join(random.choices(string.ascii_lowercase, k=12))
    report = make_report(fla_gdn_import_error=f"ImportError: cannot import name {marker!r} from 'fla.ops'")
    (finding,) = check_fla_gdn_imports(report, {})
    assert finding.severity == "error" and marker in finding.message and "fla-core" in finding.fix


def test_the_installed_fla_gdn_kernels_import_and_are_ok():
    assert probes.fresh_import_facts(None, fla_installed=True).fla_gdn_error is None
    (finding,) = check_fla_gdn_imports(make_report(), {})
    assert finding.severity == "ok", finding


def test_without_fla_there_is_nothing_to_check():
    assert check_fla_gdn_imports(make_report(versions={"fla": None}), {}) == []
