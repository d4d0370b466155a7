"""``tools/install.sh`` with this checkout only on PYTHONPATH (an air-gapped node, README's "Air-gapped nodes") installs
nothing, so pip installs no ``oellm`` console script either, and it said nothing of that: ``oellm doctor`` then failed
with "command not found". Its "nothing to install" line now says how the checkout is provided and, on PYTHONPATH, that
the command is ``PYTHON -m megatron.oellm`` there. Same stand-ins as test_install_script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit_tests.fake_site import ROOT, base_versions, bundle_site
from tests.unit_tests.install_helpers import INSTALL_NEEDS, run_install


def _provided_by(site: Path, *path: Path) -> str:
    """install_needs.py --provided-by in a Python seeing ``site``, then ``path``."""
    pythonpath = os.pathsep.join(map(str, [site, *path]))
    done = subprocess.run([sys.executable, "-S", str(INSTALL_NEEDS), "hf", "--provided-by"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": pythonpath}, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_install_needs_tells_pythonpath_from_editable(tmp_path: Path) -> None:
    bundle_site(tmp_path / "bundle")
    assert _provided_by(tmp_path / "bundle", ROOT) == "PYTHONPATH"
    assert _provided_by(tmp_path / "bundle") == ""


def test_on_pythonpath_the_line_names_the_module_command(tmp_path: Path) -> None:
    bundle_site(tmp_path / "bundle")
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="hf,gdn",
                              extra_site=tmp_path / "bundle", PYTHONPATH=str(ROOT))
    assert done.returncode == 0, done.stderr
    assert calls == []
    [line] = [line for line in done.stdout.splitlines() if "nothing to install" in line]
    assert "this checkout (PYTHONPATH)" in line
    assert line.endswith(f"no oellm command: run {tmp_path / 'bin' / 'python'} -m megatron.oellm"), line


def test_an_editable_install_has_its_command_and_no_such_note(tmp_path: Path) -> None:
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="dev,hf",
                              installed=base_versions())
    assert done.returncode == 0, done.stderr
    assert calls == []
    [line] = [line for line in done.stdout.splitlines() if "nothing to install" in line]
    assert "this checkout (editable)" in line and "megatron.oellm" not in line
