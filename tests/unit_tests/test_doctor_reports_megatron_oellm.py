"""``oellm doctor``'s Versions table names megatron-oellm itself: its version and the folder it was imported from;
and the folder of each package it lists (torch, megatron-core, fla, Triton, ...).

A container job may put a checkout on PYTHONPATH ahead of the image's copy; the report says which one runs. A torch or
fla on PYTHONPATH ahead of the environment's own copy shows by its folder.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
from pathlib import Path

import torch

import megatron.oellm
from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.doctor.probes import PACKAGE_PROBE_BY_NAME, distribution_version, module_folders
from megatron.oellm.doctor.report import format_text, to_json
from tests.unit_tests.doctor_reports import make_report
from tests.unit_tests.fake_site import add_distribution


def _word() -> str:
    """A fresh lowercase word: a marker only this run can have produced."""
    return "".join(random.choices(string.ascii_lowercase, k=10))


def _version() -> str:
    """A fresh release number."""
    return f"{random.randint(1, 9)}.{random.randint(0, 99)}.{random.randint(0, 99)}"


def test_the_versions_table_and_json_name_megatron_oellm_and_its_folder():
    version = _version()
    path, core_path = f"/{_word()}/{_word()}/megatron/oellm", f"/{_word()}/site-packages/megatron/core"
    report = make_report(megatron_oellm_version=version, megatron_oellm_path=path, megatron_core_path=core_path)
    lines = format_text(report, []).split("\n\n")[0].splitlines()[1:]
    table = {line.split()[0]: line.split()[1:] for line in lines}
    assert table["megatron-oellm"] == [version, f"({path})"]
    assert table["megatron-core"] == [MEGATRON_CORE_VERSION, f"({core_path})"]
    document = json.loads(json.dumps(to_json(report, [])))
    assert document["versions"]["megatron-oellm"] == version
    assert document["paths"] == {"megatron-oellm": path, "megatron-core": core_path}


def _version_table(report) -> dict[str, str]:
    """The text report's Versions rows, by package name: the rest of each row after the name."""
    lines = format_text(report, []).split("\n\n")[0].splitlines()[1:]
    return {line.split()[0]: line.split(None, 1)[1] for line in lines}


def test_the_versions_table_names_each_packages_folder_in_one_column():
    """torch, Triton, fla and megatron-core each with the folder it is imported from, the folders in one column (a
    log read down it shows the one that differs), and under ``paths`` in the JSON; a package not found has none."""
    site = f"/{_word()}/site-packages"
    folders = {"torch": f"{site}/torch", "triton": f"/{_word()}/shadow/triton", "fla": f"{site}/fla", "tilelang": None}
    core = f"{site}/megatron/core"
    report = make_report(megatron_oellm_path=f"/{_word()}/megatron/oellm", megatron_core_path=core,
                         module_folders={**folders, "megatron-core": f"/{_word()}/not/what/import/loads"})
    table = _version_table(report)
    for name in ("torch", "triton", "fla", "megatron-core"):
        assert table[name].split() == [report.versions[name], f"({folders.get(name, core)})"], table[name]
    assert table["tilelang"] == "-"
    rows = format_text(report, []).split("\n\n")[0].splitlines()[1:]
    assert len({row.index(" (/") for row in rows if " (/" in row}) == 1, rows
    assert to_json(report, [])["paths"] == {"megatron-oellm": report.megatron_oellm_path, **folders,
                                            "megatron-core": core}


def test_a_package_ahead_on_pythonpath_is_reported_by_its_folder(tmp_path, monkeypatch):
    """An fla copy in a stand-in site first on the path, ahead of the installed one, is the folder and version the
    doctor reports (a module already imported is reported where it was imported from)."""
    version = _version()
    (tmp_path / "fla").mkdir()
    (tmp_path / "fla" / "__init__.py").write_text("")
    add_distribution(tmp_path, "fla-core", version)
    monkeypatch.delitem(sys.modules, "fla", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    folders = module_folders()
    assert folders["fla"] == str(tmp_path / "fla")
    assert folders["torch"] == str(Path(torch.__file__).parent)
    assert "flash-attn-3" not in folders  # known by its distribution alone
    report = make_report(versions={"fla": distribution_version(PACKAGE_PROBE_BY_NAME["fla"])}, module_folders=folders)
    assert _version_table(report)["fla"].split() == [version, f"({tmp_path / 'fla'})"]


PROBE = """
import json
from megatron.oellm.doctor.probes import collect_environment
report = collect_environment({})
print(json.dumps([report.megatron_oellm_version, report.megatron_oellm_path]))
"""


def test_a_checkout_ahead_on_pythonpath_is_the_one_reported(tmp_path):
    """A copy of megatron-oellm with another version, put ahead on PYTHONPATH, is what the doctor reports."""
    source = Path(megatron.oellm.__file__).parent
    copy = tmp_path / "megatron" / "oellm"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    version = _version()
    init = copy / "__init__.py"
    init.write_text(re.sub(r'^__version__ = "[^"]*"', f'__version__ = "{version}"', init.read_text(), flags=re.M))
    env = {key: value for key, value in os.environ.items() if "ALLOC_CONF" not in key}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [version, str(copy)]
