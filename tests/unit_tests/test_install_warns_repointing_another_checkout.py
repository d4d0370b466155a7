"""``tools/install.sh`` in an environment whose editable megatron-oellm is another checkout's (a project environment on
GPFS that several users share): ``pip install -e .`` re-pointed it to this checkout without a word, changing the code
everyone's jobs run. Now it names that checkout in a warning right before the ``pip install -e`` that re-points it,
and goes on (a fresh clone's test run in an environment made from another clone must not stop). Same stand-ins as
test_install_script (pip only records its arguments)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit_tests.fake_site import base_versions, other_checkout_site
from tests.unit_tests.install_helpers import run_install


def test_re_pointing_another_checkouts_editable_install_is_warned(tmp_path: Path) -> None:
    overlay, other = other_checkout_site(tmp_path)
    extras = random.choice(["dev", "hf", "dev,hf"])
    done, calls = run_install(tmp_path, torch="None", triton=True, extras=extras, installed=base_versions(),
                              extra_site=overlay)
    assert done.returncode == 0, done.stderr
    assert calls == [["-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", f".[{extras}]"]]
    [line] = [line for line in done.stderr.splitlines() if "warning: install.sh:" in line]
    assert str(other) in line and "re-pointing" in line and "venv" in line


def test_no_warning_for_this_checkouts_own_install(tmp_path: Path) -> None:
    done, _calls = run_install(tmp_path, torch="None", triton=True, extras="dev", installed=base_versions())
    assert done.returncode == 0, done.stderr
    assert "re-pointing" not in done.stderr
