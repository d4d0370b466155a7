"""``tools/install.sh`` in an environment whose editable megatron-oellm is another checkout's (a project environment on
GPFS that several users share): ``pip install -e .`` re-pointed it to this checkout without a word, changing the code
everyone's jobs run. Now it names that checkout in a warning right before the ``pip install -e`` that re-points it,
and goes on (a fresh clone's test run in an environment made from another clone must not stop). Same stand-ins as
test_install_script (pip only records its arguments)."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

from tests.unit_tests.fake_site import checkout_version
from tests.unit_tests.test_install_needs import base_versions
from tests.unit_tests.test_install_script import run_install


def other_checkout_site(tmp_path: Path) -> tuple[Path, Path]:
    """A folder to copy over a complete stand-in site that records megatron-oellm as installed editable from another
    checkout (a fresh folder name, with a space), and that checkout."""
    other = tmp_path / f"other checkout {''.join(random.choices(string.ascii_lowercase, k=8))}"
    (other / "megatron" / "oellm").mkdir(parents=True)
    info = tmp_path / "overlay" / f"megatron_oellm-{checkout_version()}.dist-info"
    info.mkdir(parents=True)
    (info / "direct_url.json").write_text(json.dumps({"url": other.as_uri(), "dir_info": {"editable": True}}))
    return tmp_path / "overlay", other


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
