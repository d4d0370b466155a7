"""What ``tools/install.sh`` still has to install into this Python, one requirement per line (nothing when the
environment is complete).

    python tools/install_needs.py EXTRAS [--hopper]
    python tools/install_needs.py --requirements-of EXTRA     # setup.py's requirements of one extra

EXTRAS is install.sh's comma-separated argument. Printed, in install order: megatron-core's pin, then ``-e .[EXTRAS]``
when this checkout is not installed (editable, at its version) or a requirement of setup.py or of an extra is
unmet, then the TileLang set of ``docker/constraints.txt`` when ``--hopper`` (nvidia-smi lists a compute capability
9.0 GPU: H100, H200, GH200), the ``gdn`` extra is asked for and the installed Triton is in the range where fla's
Triton GDN/KDA backward is wrong on Hopper (fla issue 640), so fla needs its TileLang backward there.

install.sh runs pip only for what this prints: a compute node without a package index (most of them) can run the
README's commands once a login node has installed everything into the shared environment. pip rebuilt the editable
package at every run before, fetching setuptools from the index for it, and failed offline.
Standard library only, except ``packaging`` (a requirement itself: without it everything counts as missing).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata as metadata
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEGATRON_CORE_PIN = "megatron-core==0.19.2"
"""The megatron-core release install.sh installs (with ``--ignore-requires-python`` on Python 3.11)."""
TILELANG_SET = ("tilelang", "apache-tvm-ffi", "torch-c-dlpack-ext", "z3-solver")
"""The packages fla's TileLang backward needs, pinned in docker/constraints.txt (the versions the GPU runs used)."""
FLA_BAD_TRITON = ("3.4", "3.7.1")
"""Triton releases [from, to) whose GDN/KDA backward fla 0.6.0 refuses on Hopper without TileLang (fla issue 640);
the same range as ``megatron.oellm.doctor.rules``."""


def setup_keyword(name: str) -> object:
    """The literal value of setup.py's ``setup(name=...)`` keyword, read from its source (not run)."""
    calls = [node for node in ast.walk(ast.parse((ROOT / "setup.py").read_text())) if isinstance(node, ast.Call)]
    return next(ast.literal_eval(keyword.value) for call in calls for keyword in call.keywords if keyword.arg == name)


def extra_requirements(extra: str) -> list[str]:
    """The requirements setup.py declares for ``extra`` (named as pip normalises it: ``Dev`` is ``dev``)."""
    declared = setup_keyword("extras_require")
    return list(declared[re.sub(r"[-_.]+", "-", extra.strip()).lower()])


def setup_requirements(extras: Sequence[str]) -> list[str]:
    """setup.py's ``install_requires`` and the requirements of ``extras``."""
    return [*setup_keyword("install_requires"), *(item for extra in extras for item in extra_requirements(extra))]


def unmet(requirements: Iterable[str]) -> list[str]:
    """The requirements whose distribution is not installed at an admitted version (all of them when ``packaging``
    does not import). A requirement's extras (``pkg[a,b]``) count as met with the package itself."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return list(requirements)
    missing = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            missing.append(text)
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            missing.append(text)
    return missing


def checkout_installed() -> bool:
    """Whether megatron-oellm is installed editable from this checkout (PEP 610's ``direct_url.json``) at its version,
    so that ``import megatron.oellm`` runs this checkout's code."""
    try:
        distribution = metadata.distribution("megatron-oellm")
    except metadata.PackageNotFoundError:
        return False
    text = (ROOT / "megatron/oellm/__init__.py").read_text()
    version = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    direct = json.loads(distribution.read_text("direct_url.json") or "{}")
    return (direct.get("dir_info", {}).get("editable", False) and direct.get("url") == ROOT.as_uri()
            and version is not None and distribution.version == version.group(1))


def triton_needs_tilelang() -> bool:
    """Whether the installed Triton is in :data:`FLA_BAD_TRITON` (False without a Triton or with an unreadable
    version: the doctor's fla rule reports those)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return False
    for name in ("triton", "pytorch-triton"):
        try:
            installed = Version(metadata.version(name))
        except (metadata.PackageNotFoundError, InvalidVersion):
            continue
        return Version(FLA_BAD_TRITON[0]) <= installed < Version(FLA_BAD_TRITON[1])
    return False


def tilelang_pins() -> list[str]:
    """The :data:`TILELANG_SET` pins of docker/constraints.txt, in its order."""
    lines = (ROOT / "docker/constraints.txt").read_text().splitlines()
    pins = [line.strip() for line in lines if line.split("==")[0].strip() in TILELANG_SET]
    if len(pins) != len(TILELANG_SET):
        sys.exit(f"install_needs.py: docker/constraints.txt pins {pins}, not the whole TileLang set {TILELANG_SET}")
    return pins


def needs(extras: Sequence[str], hopper: bool) -> list[str]:
    """The requirements install.sh installs, in its order (see the module docstring)."""
    wanted: list[str] = unmet([MEGATRON_CORE_PIN])
    if not checkout_installed() or unmet(setup_requirements(extras)):
        wanted.append(f"-e .[{','.join(extras)}]")
    if hopper and "gdn" in extras and triton_needs_tilelang():
        wanted += unmet(tilelang_pins())
    return wanted


def main(argv: Sequence[str] | None = None) -> int:
    """Print :func:`needs` for the command line's EXTRAS (or one extra's requirements), one per line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extras", nargs="?", help="install.sh's comma-separated EXTRAS (checked against setup.py by it)")
    parser.add_argument("--hopper", action="store_true", help="the node has a Hopper GPU (compute capability 9.0)")
    parser.add_argument("--requirements-of", metavar="EXTRA",
                        help="print setup.py's requirements of EXTRA instead (install.sh installs te's on its own)")
    args = parser.parse_args(argv)
    if (args.extras is None) == (args.requirements_of is None):
        parser.error("give EXTRAS or --requirements-of EXTRA")
    if args.requirements_of is not None:
        lines = extra_requirements(args.requirements_of)
    else:
        lines = needs([extra.strip() for extra in args.extras.split(",")], args.hopper)
    if lines:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
