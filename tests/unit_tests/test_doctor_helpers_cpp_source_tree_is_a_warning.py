"""``oellm doctor`` on a megatron-core source tree (a Megatron-LM checkout on PYTHONPATH) whose dataset helper is not
built: a warning, not an error.

Where ``megatron/core/datasets/Makefile`` is in place, megatron compiles the helper with make at start (what fails is
an installed wheel, which ships no Makefile); the doctor called it an error and told to rebuild the site bundle or
reinstall megatron-core. It now says that megatron compiles it at start, what that needs, and the command that builds
it now.
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

from megatron.oellm.doctor import probes
from megatron.oellm.doctor.report import exit_status
from megatron.oellm.doctor.rules import check_environment, check_helpers_cpp
from tests.unit_tests.doctor_reports import make_report

ROOT = Path(__file__).resolve().parents[2]


def _source_tree(root: Path) -> Path:
    """A megatron-core source tree under ``root`` with its Makefile and no helper built."""
    core = root / "megatron" / "core"
    (core / "datasets").mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "datasets" / "__init__.py").write_text("")
    (core / "datasets" / "Makefile").write_text(f"# {''.join(random.choices(string.ascii_letters, k=20))}\n")
    return core


def test_the_rule_warns_with_the_make_command() -> None:
    path = f"/home/{''.join(random.choices(string.ascii_lowercase, k=8))}/Megatron-LM/megatron/core"
    error = f"ModuleNotFoundError: No module named 'megatron.core.datasets.helpers_cpp' ({random.randrange(10**6)})"
    report = make_report(helpers_cpp_import_error=error, helpers_cpp_mismatch="no helpers_cpp*.so",
                         helpers_cpp_makefile=True, megatron_core_path=path)
    (finding,) = check_helpers_cpp(report, {})
    assert finding.severity == "warning", finding
    assert error in finding.message and "compiles" in finding.message and "C++ compiler" in finding.message
    assert f"make -C {path}/datasets" in finding.fix
    assert "build_site_bundle" not in finding.fix and "pip install" not in finding.fix
    assert exit_status(check_environment(report, {})) == 0


def test_without_the_makefile_it_stays_an_error() -> None:
    report = make_report(helpers_cpp_import_error="ImportError: wrong ELF class", megatron_core_path="/site/megatron/core")
    (finding,) = check_helpers_cpp(report, {})
    assert finding.severity == "error" and "make -C" not in finding.fix


@pytest.mark.skipif(not probes.package_folders("megatron.core"), reason="megatron-core is not installed here")
def test_the_doctor_finds_the_makefile_of_a_source_tree_on_pythonpath(tmp_path: Path) -> None:
    core = _source_tree(tmp_path)
    pythonpath = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "megatron.oellm", "doctor", "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath}, timeout=600, check=False)
    (finding,) = [item for item in json.loads(done.stdout)["findings"] if item["name"] == "megatron-core-helpers"]
    assert finding["severity"] == "warning", finding
    assert f"make -C {core}/datasets" in finding["fix"]
