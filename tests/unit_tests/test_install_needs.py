"""``tools/install_needs.py``: what install.sh still installs, asked of a Python (started with ``-S``) that sees only
a stand-in site-packages, so that a complete environment needs no package index (air-gapped compute nodes) and the
gdn extra with a Triton fla refuses on Hopper gets TileLang (also on a GPU-less login node filling the environment)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit_tests.fake_site import ROOT, add_distribution, base_versions, complete_site
from tests.unit_tests.install_helpers import INSTALL_NEEDS, TILELANG_PINS


def needs(site: Path, *args: str) -> list[str]:
    """The lines install_needs.py prints for ``args`` in a Python seeing only ``site``."""
    done = subprocess.run([sys.executable, "-S", str(INSTALL_NEEDS), *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(site)}, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_complete_environment_needs_nothing(tmp_path: Path) -> None:
    complete_site(tmp_path, base_versions())
    assert needs(tmp_path, "dev,hf,gdn") == []  # no Triton: nothing for fla's TileLang path to replace
    assert needs(tmp_path, " Dev, HF,gdn") == []  # pip's spelling of the extras


@pytest.mark.parametrize(("change", "expected"), [
    ({"numpy": "2.4.0"}, ["-e .[dev,hf]"]),
    ({"transformers": "5.6.1"}, ["-e .[dev,hf]"]),
    ({"megatron-core": "0.19.1"}, ["megatron-core==0.19.2", "-e .[dev,hf]"]),
])
def test_an_unmet_requirement_reinstalls(tmp_path: Path, change: dict[str, str], expected: list[str]) -> None:
    complete_site(tmp_path, {**base_versions(), **change})
    assert needs(tmp_path, "dev,hf") == expected


def test_a_requested_extra_not_installed_reinstalls(tmp_path: Path) -> None:
    versions = base_versions()
    del versions[random.choice(["fla-core", "flash-linear-attention"])]
    complete_site(tmp_path, versions)
    assert needs(tmp_path, "dev,hf") == []
    assert needs(tmp_path, "dev,gdn") == ["-e .[dev,gdn]"]


def _editable_url(site: Path, url: str) -> None:
    """Record ``url`` as the editable install's source in ``site``'s megatron-oellm distribution."""
    for info in site.glob("megatron_oellm-*.dist-info"):
        (info / "direct_url.json").write_text(json.dumps({"url": url, "dir_info": {"editable": True}}))


def test_megatron_oellm_of_another_checkout_reinstalls(tmp_path: Path) -> None:
    """An editable install of another folder (or a plain one) runs that code, not this checkout's."""
    site, other = tmp_path / "site", tmp_path / "other-checkout"
    other.mkdir()
    complete_site(site, base_versions())
    _editable_url(site, other.as_uri())
    assert needs(site, "dev") == ["-e .[dev]"]


def test_this_checkout_through_a_symlink_is_installed(tmp_path: Path) -> None:
    """pip records the path as typed (``pip install -e ~/megatron-oellm`` with a symlinked home): the same checkout."""
    site, link = tmp_path / "site", tmp_path / "link to checkout"
    link.symlink_to(ROOT)
    complete_site(site, base_versions())
    _editable_url(site, link.as_uri())
    assert needs(site, "dev") == []


def test_without_packaging_everything_counts_as_missing(tmp_path: Path) -> None:
    """A bare environment (packaging is a requirement too) gets every install step."""
    add_distribution(tmp_path, "megatron-core", "0.19.2")
    assert needs(tmp_path, "dev") == ["megatron-core==0.19.2", "-e .[dev]"]


def test_an_affected_triton_with_gdn_gets_the_tilelang_set(tmp_path: Path) -> None:
    """No GPU is asked for: a login node filling a shared environment for the Hopper nodes gets it too."""
    triton = random.choice([f"3.{random.randint(4, 6)}.{random.randint(0, 3)}", "3.7.1rc1", "3.6.0+git1a2b3c",
                            "3.7.0.post1"])
    complete_site(tmp_path, {**base_versions(), "triton": triton})
    assert needs(tmp_path, "dev,gdn") == TILELANG_PINS
    assert needs(tmp_path, "dev,GDN") == TILELANG_PINS
    assert needs(tmp_path, "dev,hf") == []  # no GDN kernels asked for
    assert needs(tmp_path, "dev,gdn", "--no-hopper") == []  # a node whose listed GPUs are all of another generation


def test_without_packaging_the_triton_range_is_still_read(tmp_path: Path) -> None:
    """A fresh venv (torch does not bring packaging) gets TileLang in the same run, not in a second one."""
    add_distribution(tmp_path, "triton", f"3.{random.randint(4, 6)}.0")
    assert needs(tmp_path, "gdn") == ["megatron-core==0.19.2", "-e .[gdn]", *TILELANG_PINS]


def test_tilelang_already_at_its_pins_needs_nothing(tmp_path: Path) -> None:
    complete_site(tmp_path, {**base_versions(), "triton": "3.6.0",
                             **dict(pin.split("==") for pin in TILELANG_PINS[1:])})
    assert needs(tmp_path, "dev,gdn") == ["tilelang==0.1.15"]


@pytest.mark.parametrize("triton", ["3.3.1", "3.4.0rc1", "3.7.1", "3.8.0", "3.7.1.post1"])
def test_a_triton_outside_the_affected_range_needs_no_tilelang(tmp_path: Path, triton: str) -> None:
    complete_site(tmp_path, {**base_versions(), "triton": triton})
    assert needs(tmp_path, "dev,gdn") == []


def test_no_extras_installs_the_package_alone(tmp_path: Path) -> None:
    assert needs(tmp_path, "") == ["megatron-core==0.19.2", "-e ."]
