"""``oellm doctor`` where megatron-core's compiled dataset helper does not load: an error naming the build mismatch.

A site bundle built for another Python or CPU architecture passed the doctor (0 errors), but every rank died at start:
``megatron.core.datasets.helpers_cpp`` did not load, megatron tried to compile it with ``make`` ("No targets specified
and no makefile found") and exited. The doctor now imports the helper in a fresh interpreter.
"""

from __future__ import annotations

import os
import platform
import random
import sysconfig
from pathlib import Path

import pytest

from megatron.oellm.doctor import probes
from megatron.oellm.doctor.report import exit_status
from megatron.oellm.doctor.rules import check_environment, check_helpers_cpp
from tests.unit_tests.doctor_reports import make_report

OTHER_MACHINES = {"x86_64": 0x3E, "aarch64": 0xB7}


def _fake_core(root: Path) -> Path:
    """A megatron-core package tree under ``root`` (first on PYTHONPATH it shadows the installed one): no helper
    built yet."""
    core = root / "megatron" / "core"
    (core / "datasets").mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "datasets" / "__init__.py").write_text("")
    return core


def _shadow(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Put ``root`` first on the PYTHONPATH the doctor's fresh interpreters inherit."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))


def _other_python_tag() -> tuple[str, str]:
    """(``3.N``, extension suffix) of a random CPython release other than this one, on this machine."""
    import sys

    minor = random.choice([n for n in range(8, 16) if n != sys.version_info.minor])
    return f"3.{minor}", f".cpython-3{minor}-{platform.machine()}-linux-gnu.so"


def test_a_helper_built_for_another_python_is_an_error_naming_its_tag(tmp_path, monkeypatch):
    core = _fake_core(tmp_path)
    version, suffix = _other_python_tag()
    (core / "datasets" / f"helpers_cpp{suffix}").write_bytes(random.randbytes(random.randint(64, 512)))
    _shadow(monkeypatch, tmp_path)
    error, mismatch, _ = probes.fresh_import_facts(core, fla_installed=False)
    assert error is not None and "helpers_cpp" in error, error
    assert mismatch is not None and f"CPython {version}" in mismatch and sysconfig.get_config_var("EXT_SUFFIX") in mismatch
    report = make_report(helpers_cpp_import_error=error, helpers_cpp_mismatch=mismatch, megatron_core_path=str(core),
                         python_version="3.11.9", machine=platform.machine())
    (finding,) = check_helpers_cpp(report, {})
    assert finding.severity == "error", finding
    assert f"CPython {version}" in finding.message and "make" in finding.message
    assert "build_site_bundle.sh --python-version 3.11" in finding.fix and "--ignore-requires-python" in finding.fix
    assert exit_status(check_environment(report, {})) == 1


def test_a_helper_built_for_another_cpu_is_an_error_naming_both_architectures(tmp_path, monkeypatch):
    """The file carries this interpreter's suffix (a bundle renamed or unpacked by hand) but its ELF header names
    another machine: the loader refuses it, and the doctor says for which CPU it was built."""
    here = platform.machine()
    other = next(machine for machine in OTHER_MACHINES if machine != here)
    core = _fake_core(tmp_path)
    header = bytearray(random.randbytes(64))
    header[:6] = b"\x7fELF\x02\x01"
    header[18:20] = OTHER_MACHINES[other].to_bytes(2, "little")
    (core / "datasets" / f"helpers_cpp{sysconfig.get_config_var('EXT_SUFFIX')}").write_bytes(bytes(header))
    _shadow(monkeypatch, tmp_path)
    error, mismatch, _ = probes.fresh_import_facts(core, fla_installed=False)
    assert error is not None, "a library for another CPU loaded"
    assert mismatch is not None and f"built for {other}" in mismatch and here in mismatch
    (finding,) = check_helpers_cpp(make_report(helpers_cpp_import_error=error, helpers_cpp_mismatch=mismatch,
                                               megatron_core_path=str(core), machine=here), {})
    assert finding.severity == "error" and other in finding.message and f"--arch {here}" in finding.fix


@pytest.mark.skipif(not probes.package_folders("megatron.core"), reason="megatron-core is not installed here")
def test_the_installed_helper_loads_and_is_ok():
    error, mismatch, _ = probes.fresh_import_facts(probes.package_folders("megatron.core")[0], fla_installed=False)
    assert (error, mismatch) == (None, None)
    report = make_report(megatron_core_path=str(probes.package_folders("megatron.core")[0]))
    (finding,) = check_helpers_cpp(report, {})
    assert finding.severity == "ok", finding
