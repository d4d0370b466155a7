"""A stand-in site-packages for the install tests: distributions as bare ``.dist-info`` folders (name and version
only), PEP 610 ``direct_url.json`` for an editable install, and a copy of ``packaging`` (what tools/install_needs.py
imports), so that a Python started with ``-S`` and this folder on PYTHONPATH sees exactly these distributions."""

from __future__ import annotations

import json
import shutil
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
