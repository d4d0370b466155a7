"""An air-gapped node set up as README's "Air-gapped nodes" says: the site bundle and this checkout on PYTHONPATH,
megatron-oellm not pip-installed. ``tools/install_needs.py hf,gdn`` printed ``-e .[hf,gdn]`` there, so install.sh
called pip, which failed without a package index, although everything imported. This checkout importing from the
path now counts as installed (another checkout there does not); and a failing pip gets one line naming the offline
site bundle."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from tests.unit_tests.fake_site import ROOT, base_versions, bundle_site, other_checkout_site
from tests.unit_tests.install_helpers import INSTALL_NEEDS, run_install

HINT = 'error: install.sh: pip install failed; no package index reachable? use the offline site bundle instead'


def needs(site: Path, *path: Path) -> list[str]:
    """install_needs.py's lines for ``hf,gdn`` in a Python seeing ``site``, then ``path``."""
    pythonpath = os.pathsep.join(map(str, [site, *path]))
    done = subprocess.run([sys.executable, "-S", str(INSTALL_NEEDS), "hf,gdn"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": pythonpath}, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_this_checkout_on_pythonpath_needs_nothing(tmp_path: Path) -> None:
    bundle_site(tmp_path / "site")
    assert needs(tmp_path / "site", ROOT) == []


def test_another_checkout_on_pythonpath_is_not_this_one(tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "megatron" / "oellm").mkdir(parents=True)
    (other / "megatron" / "oellm" / "__init__.py").write_text(f'__version__ = "0.{random.randint(2, 99)}.0"\n')
    bundle_site(tmp_path / "site")
    assert needs(tmp_path / "site", other) == ["-e .[hf,gdn]"]
    assert needs(tmp_path / "site") == ["-e .[hf,gdn]"]


def test_an_unmet_requirement_still_installs_the_package(tmp_path: Path) -> None:
    bundle_site(tmp_path / "site", **random.choice([{"transformers": None}, {"fla-core": "0.5.0"}]))
    assert needs(tmp_path / "site", ROOT) == ["-e .[hf,gdn]"]


def test_a_failing_pip_names_the_offline_bundle(tmp_path: Path) -> None:
    """No package index: the CPU torch is tried from the configured indexes (quietly), then from PyTorch's index."""
    failure = (f"ERROR: Could not find a version that satisfies the requirement torch==2.{random.randrange(10**6)} "
               "(from versions: none)")
    done, calls = run_install(tmp_path, FAKE_PIP_FAILURE=failure)
    assert done.returncode == 1
    assert len(calls) == 2
    lines = done.stderr.splitlines()
    assert lines[-2:] == [failure, f'{HINT} (README.md, "Air-gapped nodes")']
    assert done.stderr.count("offline site bundle") == 1


def test_this_checkout_on_pythonpath_re_points_no_other_checkout(tmp_path: Path) -> None:
    """A user's checkout on PYTHONPATH in a shared environment with another's editable install: nothing to install,
    so nothing is re-pointed and nothing refused."""
    overlay, _ = other_checkout_site(tmp_path)
    done, calls = run_install(tmp_path, torch="'13.0'", triton=True, driver="590.48.01", extras="hf,gdn",
                              installed=base_versions(), extra_site=overlay, PYTHONPATH=str(ROOT))
    assert done.returncode == 0, done.stderr
    assert calls == []
