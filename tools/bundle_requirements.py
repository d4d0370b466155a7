"""What an offline site bundle needs from the node: the requirements of its packages that it does not carry.

    python3 tools/bundle_requirements.py SITE_DIR --python-version 3.12 --arch x86_64

Reads the ``Requires-Dist`` lines of every ``*.dist-info/METADATA`` under ``SITE_DIR`` (``tools/build_site_bundle.sh``
unpacks its wheels there), keeps those that apply on Linux at the given Python version and CPU architecture (extras
not asked for), with ``--with-checkout`` adds megatron-oellm's own (setup.py's ``install_requires``: it runs from a checkout, which has
no ``.dist-info``), drops the ones the bundle provides itself, and prints one line per required name: the name, the
version ranges asked for, and which bundled packages ask. A node whose Python lacks one of them fails at import (fla
without ``einops``, TileLang without ``ml-dtypes``); the bundle script writes this list beside the packages and says it
on its last line, so the node can be checked before a job is queued.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a machine with pip but not packaging: pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

from install_needs import setup_keyword  # this folder's: a script's own folder is first on sys.path


def marker_environment(python_version: str, arch: str) -> dict[str, str]:
    """The values a requirement's environment marker is evaluated against on a Linux node."""
    return {"python_version": python_version, "python_full_version": f"{python_version}.0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": arch, "extra": ""}


def bundled_metadata(site: Path) -> dict[str, list[str]]:
    """Canonical name -> ``Requires-Dist`` values, for each distribution unpacked in ``site``."""
    found = {}
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        headers = HeaderParser().parsestr(metadata.read_text(encoding="utf-8"))
        found[canonicalize_name(headers["Name"])] = headers.get_all("Requires-Dist") or []
    return found


CHECKOUT = "megatron-oellm (checkout)"
"""The asker named for setup.py's ``install_requires``: megatron-oellm runs from a checkout on the node's PYTHONPATH,
with no ``.dist-info`` of its own that ``pip check`` could read."""


def node_requirements(site: Path, python_version: str, arch: str,
                      checkout: bool = False) -> dict[str, tuple[set[str], set[str]]]:
    """Required name -> (the version ranges asked for, the bundled packages asking), for requirements that apply
    on the node and that the bundle does not carry; with ``checkout``, megatron-oellm's own (:data:`CHECKOUT`)."""
    environment = marker_environment(python_version, arch)
    bundled = bundled_metadata(site)
    needed: dict[str, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    askers = [*bundled.items(), *([(CHECKOUT, setup_keyword("install_requires"))] if checkout else [])]
    for package, requirements in askers:
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            name = canonicalize_name(requirement.name)
            if name in bundled:
                continue
            specifiers, askers = needed[name]
            if str(requirement.specifier):
                specifiers.add(str(requirement.specifier))
            askers.add(package)
    return dict(sorted(needed.items()))


def format_requirements(needed: dict[str, tuple[set[str], set[str]]]) -> str:
    """One line per name: ``name specifiers  # asked for by a, b``."""
    lines = []
    for name, (specifiers, askers) in needed.items():
        wanted = f"{name} {','.join(sorted(specifiers))}".rstrip()
        lines.append(f"{wanted:40s}  # asked for by {', '.join(sorted(askers))}")
    return "".join(f"{line}\n" for line in lines)


def main(argv: list[str] | None = None) -> int:
    """Print the node's requirements; 2 when SITE_DIR holds no unpacked distribution."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="folder the bundle's wheels are unpacked into")
    parser.add_argument("--python-version", required=True, help="the node's MAJOR.MINOR, e.g. 3.12")
    parser.add_argument("--arch", required=True, choices=["x86_64", "aarch64"], help="the node's CPU architecture")
    parser.add_argument("--with-checkout", action="store_true",
                        help="add megatron-oellm's own requirements (setup.py's install_requires): the bundle runs it "
                             "from a checkout on PYTHONPATH")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        parser.error(f"--python-version must be MAJOR.MINOR, e.g. 3.12, got {args.python_version!r}")
    if not any(args.site.glob("*.dist-info/METADATA")):
        parser.error(f"{args.site} holds no unpacked distribution (no */METADATA under a .dist-info folder)")
    needed = node_requirements(args.site, args.python_version, args.arch, checkout=args.with_checkout)
    sys.stdout.write(format_requirements(needed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
