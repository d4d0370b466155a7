"""``oellm doctor``'s imports of megatron-core's compiled dataset helper and of fla's GDN kernels run in ONE fresh
interpreter, each reported on its own.

They ran one after the other in two fresh interpreters, each loading torch again: the doctor took 13 s where it took
1.7 s before them. Now one interpreter imports both in turn and prints each one's outcome as it goes, so each
finding keeps its own error, and one that crashes the interpreter loses none reported before it.
"""

from __future__ import annotations

import importlib.util
import os
import random
import string
import subprocess
from pathlib import Path

import pytest

from megatron.oellm.doctor import probes
from megatron.oellm.doctor.rules import check_fla_gdn_imports, check_helpers_cpp
from tests.unit_tests.doctor_reports import make_report

HELPER_IMPORT = "megatron.core.datasets.helpers_cpp"
FLA_IMPORT = "chunk_gated_delta_rule"

needs_core_and_fla = pytest.mark.skipif(
    not probes.package_folders("megatron.core") or importlib.util.find_spec("fla") is None
    or importlib.util.find_spec("torch") is None, reason="needs megatron-core, fla and torch")


def _first_on_path(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Put ``folder`` first on the PYTHONPATH the doctor's fresh interpreters inherit."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))


def _name() -> str:
    return "".join(random.choices(string.ascii_lowercase, k=10))


@needs_core_and_fla
def test_collect_environment_imports_both_in_one_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    codes: list[str] = []
    run = subprocess.run

    def recording_run(command, *args, **kwargs):
        codes.extend(command[2:3] if command[1:2] == ["-c"] else [])
        return run(command, *args, **kwargs)

    monkeypatch.setattr(probes.subprocess, "run", recording_run)
    report = probes.collect_environment()
    probing = [code for code in codes if HELPER_IMPORT in code or FLA_IMPORT in code]
    assert len(probing) == 1 and HELPER_IMPORT in probing[0] and FLA_IMPORT in probing[0], probing
    assert (report.helpers_cpp_import_error, report.fla_gdn_import_error) == (None, None)


@pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="fla is not installed here")
def test_each_finding_keeps_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A megatron-core tree without its helper and an einops that is not found, in the same interpreter."""
    core = tmp_path / "megatron" / "core"
    (core / "datasets").mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "datasets" / "__init__.py").write_text("")
    (tmp_path / "einops.py").write_text("raise ModuleNotFoundError(\"No module named 'einops'\", name='einops')\n")
    _first_on_path(monkeypatch, tmp_path)
    facts = probes.fresh_import_facts(core, fla_installed=True)
    assert facts.helpers_cpp_error is not None and "helpers_cpp" in facts.helpers_cpp_error
    assert facts.helpers_cpp_mismatch is not None and "holds no helpers_cpp" in facts.helpers_cpp_mismatch
    assert facts.fla_gdn_error is not None and "einops" in facts.fla_gdn_error
    report = make_report(helpers_cpp_import_error=facts.helpers_cpp_error, fla_gdn_import_error=facts.fla_gdn_error,
                         helpers_cpp_mismatch=facts.helpers_cpp_mismatch, megatron_core_path=str(core))
    (helpers,) = check_helpers_cpp(report, {})
    (fla,) = check_fla_gdn_imports(report, {})
    assert helpers.severity == fla.severity == "error"
    assert "helpers_cpp" in helpers.message and "einops" not in helpers.message
    assert "einops" in fla.message and "pip install einops" in fla.fix and "helpers_cpp" not in fla.message


def test_a_crash_loses_no_outcome_reported_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports that pass, fail (a multi-line message: its last line) and end the interpreter, in turn."""
    broken, crashing, status = _name(), _name(), random.randint(3, 120)
    (tmp_path / f"{broken}.py").write_text(f"raise ImportError('first line\\n\\n  {broken} last line\\n')\n")
    (tmp_path / f"{crashing}.py").write_text(f"import os\nos._exit({status})\n")
    _first_on_path(monkeypatch, tmp_path)
    names = [_name() for _ in range(4)]
    errors = probes.fresh_import_errors({names[0]: "import json", names[1]: f"import {broken}",
                                         names[2]: f"import {crashing}", names[3]: "import json"})
    assert errors[names[0]] is None
    assert errors[names[1]] == f"ImportError: {broken} last line"
    assert errors[names[2]] == errors[names[3]] == f"the import probe exited with status {status}"


def test_nothing_to_probe_starts_no_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes.subprocess, "run", lambda *args, **kwargs: pytest.fail("an interpreter was started"))
    assert probes.fresh_import_facts(None, fla_installed=False) == (None, None, None)
