"""The doctor's fixes that name the offline site bundle say what README's "Air-gapped nodes" says: check the
checksum, unpack into a fresh folder (unpacked over an earlier bundle's folder, the packages of both mix), put that
folder on PYTHONPATH. They said "untar it on the node" and "put it on PYTHONPATH in place of the old one", which
invited unpacking the new bundle over the old one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.doctor.rules import check_helpers_cpp, check_megatron_core, site_bundle_route
from tests.unit_tests.doctor_reports import make_report

README = Path(__file__).resolve().parents[2] / "README.md"


def _report(**changes):
    """A report of a random Python minor and CPU, with ``changes``."""
    return make_report(python_version=f"3.{random.choice([11, 12])}.{random.randint(0, 9)}",
                       machine=random.choice(["x86_64", "aarch64"]), **changes)


def _says_the_readme_steps(fix: str) -> None:
    assert "untar" not in fix
    assert "sha256sum -c" in fix and "fresh folder" in fix and "would mix" in fix
    assert 'README.md, "Air-gapped nodes"' in fix


def test_the_readme_section_has_the_steps_the_fixes_name() -> None:
    section = README.read_text().split("### Air-gapped nodes", 1)[1].split("\n## ", 1)[0]
    assert "sha256sum -c" in section and "fresh folder" in section and "would mix" in section


@pytest.mark.parametrize("installed", [None, "0.18.0"])
def test_the_megatron_core_fix_names_the_readme_steps(installed: str | None) -> None:
    report = _report(versions={"megatron-core": installed})
    (finding,) = check_megatron_core(report, {})
    assert finding.severity == "error"
    _says_the_readme_steps(finding.fix)
    assert site_bundle_route(report) in finding.fix


def test_the_helper_fix_puts_a_fresh_folder_in_place_of_the_old_bundles() -> None:
    report = _report(helpers_cpp_import_error=f"ImportError: wrong ELF class {random.randrange(10**6)}",
                     megatron_core_path="/bundles/site-cp312/megatron/core")
    (finding,) = check_helpers_cpp(report, {})
    assert finding.severity == "error"
    _says_the_readme_steps(finding.fix)
    assert "in place of the old bundle's folder" in finding.fix
