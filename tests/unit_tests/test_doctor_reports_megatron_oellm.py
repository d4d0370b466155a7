"""``oellm doctor``'s Versions table names megatron-oellm itself: its version and the folder it was imported from.

A container job may put a checkout on PYTHONPATH ahead of the image's copy; the report says which one runs.
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

import megatron.oellm
from megatron.oellm import MEGATRON_CORE_VERSION
from megatron.oellm.doctor.report import format_text, to_json
from tests.unit_tests.doctor_reports import make_report


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
