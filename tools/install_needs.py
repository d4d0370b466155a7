"""What ``tools/install.sh`` still has to install into this Python, one requirement per line (nothing when the
environment is complete).

    python tools/install_needs.py EXTRAS [--no-hopper]
    python tools/install_needs.py EXTRAS --warn-repoint   # a warning if ``-e .`` re-points another checkout
    python tools/install_needs.py EXTRAS --provided-by    # ``editable``, ``PYTHONPATH`` or nothing: how this checkout
                                                          # is provided (EXTRAS is not read)

EXTRAS is install.sh's comma-separated argument (pip's spelling: ``GDN`` and `` gdn`` are ``gdn``). Printed, in install
order: megatron-core's pin, then ``-e .[EXTRAS]`` when this checkout is not provided (installed editable at its
version, or importing from the path, as on an air-gapped node with the checkout on PYTHONPATH) or a requirement of
setup.py or of an extra is unmet, then the TileLang set of ``docker/constraints.txt`` when the ``gdn`` extra is asked
for and the installed Triton is in the range where fla's Triton GDN/KDA backward is wrong on Hopper (fla issue 640),
so fla needs its TileLang backward there. The TileLang set does not wait for a Hopper GPU to be seen:
the environment is often filled on a GPU-less login node for the clusters' Hopper nodes (H100, H200, GH200); only
``--no-hopper`` (install.sh passes it where nvidia-smi lists GPUs, none of compute capability 9.x) leaves it out.

install.sh runs pip only for what this prints: a compute node without a package index (most of them) can run the
README's commands once a login node has installed everything into the shared environment. pip rebuilt the editable
package at every run before, fetching setuptools from the index for it, and failed offline.
Standard library only, except ``packaging`` (a requirement itself: without it everything but the Triton range counts
as missing).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata as metadata
import importlib.util
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

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


def normalized_extra(extra: str) -> str:
    """``extra`` as pip compares it (PEP 685): stripped, lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", extra.strip()).lower()


def checked_extras(text: str) -> list[str]:
    """install.sh's comma-separated EXTRAS as pip spells them, each once; ``ValueError`` naming the extras setup.py
    does not declare (pip only warns about one, a typo such as ``tee``, and installs without it)."""
    declared = setup_keyword("extras_require")
    given = text.split(",")
    unknown = [name for name in given if normalized_extra(name) not in declared]
    if unknown:
        raise ValueError(f"unknown extra {', '.join(map(repr, unknown))} in EXTRAS {text!r}; setup.py has: "
                         f"{', '.join(declared)}")
    return list(dict.fromkeys(normalized_extra(name) for name in given))


def extra_requirements(extra: str) -> list[str]:
    """The requirements setup.py declares for ``extra``."""
    return list(setup_keyword("extras_require")[normalized_extra(extra)])


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


def editable_folder() -> Path | None:
    """The folder (resolved: pip records the path as typed, and a symlinked home is the same folder) that this
    Python's megatron-oellm is installed editable from (PEP 610's ``direct_url.json``); None when it is not installed
    or not editable. install.sh must not re-point another checkout's editable install without being asked to."""
    try:
        distribution = metadata.distribution("megatron-oellm")
    except metadata.PackageNotFoundError:
        return None
    direct = json.loads(distribution.read_text("direct_url.json") or "{}")
    url = urlparse(direct.get("url", ""))
    if not direct.get("dir_info", {}).get("editable", False) or url.scheme != "file":
        return None
    return Path(unquote(url.path)).resolve()


def checkout_installed() -> bool:
    """Whether megatron-oellm is installed editable from this checkout at its version, so that ``import
    megatron.oellm`` runs this checkout's code and pip's metadata (version, the ``oellm`` script) is current."""
    if editable_folder() != ROOT:
        return False
    version = re.search(r'^__version__ = "([^"]+)"', (ROOT / "megatron/oellm/__init__.py").read_text(), re.M)
    return version is not None and metadata.version("megatron-oellm") == version.group(1)


def checkout_imported() -> bool:
    """Whether ``import megatron.oellm`` finds this checkout's package (its module's folder is
    ``ROOT/megatron/oellm``): so it does with the checkout on PYTHONPATH, as on an air-gapped node that installed
    nothing with pip (README, "Air-gapped nodes")."""
    try:
        spec = importlib.util.find_spec("megatron.oellm")
    except ImportError:
        return False
    return (spec is not None and spec.origin is not None
            and Path(spec.origin).resolve().parent == ROOT / "megatron/oellm")


def checkout_provided() -> bool:
    """Whether this checkout's code is what imports without installing it: installed editable at its version, or on
    the path while pip's editable install (if any) is another folder's (one of this folder at an older version is
    reinstalled, so that its metadata is current)."""
    return checkout_installed() or checkout_on_path()


def checkout_on_path() -> bool:
    """Whether this checkout imports from the path while pip's editable install (if any) is another folder's."""
    return editable_folder() != ROOT and checkout_imported()


def provided_by() -> str | None:
    """How this checkout is provided (:func:`checkout_provided`): ``editable`` (pip installed it, with its ``oellm``
    command), ``PYTHONPATH`` (it imports from the path only: no ``oellm`` command, ``python3 -m megatron.oellm``
    runs it), or None."""
    if checkout_installed():
        return "editable"
    return "PYTHONPATH" if checkout_on_path() else None


def package_needed(extras: Sequence[str]) -> bool:
    """Whether install.sh runs ``pip install -e .[EXTRAS]``: this checkout is not provided, or a requirement of
    setup.py or of ``extras`` is unmet."""
    return not checkout_provided() or bool(unmet(setup_requirements(extras)))


def repointed_folder() -> Path | None:
    """The other checkout whose editable install ``pip install -e .`` of this one replaces (install.sh asks only
    right before that call), None when the editable install is none or this checkout's. In a shared (project)
    environment that changes the code every user's jobs run."""
    folder = editable_folder()
    return folder if folder not in (None, ROOT) else None


def release_of(version: str) -> tuple[int, int, int, int] | None:
    """(major, minor, patch, 0 for a pre-release else 1) of a version string such as ``3.6.0``, ``3.6.0+gitabc`` or
    ``3.7.1rc1``, which sorts as versions do (a pre-release before its release), read without ``packaging``, which a
    fresh environment may lack; None for a string that does not start with a release number."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?(\.?(?:a|b|rc|dev)\d*)?", version.strip())
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0), 0 if match[4] is not None else 1


def triton_needs_tilelang() -> bool:
    """Whether the installed Triton is in :data:`FLA_BAD_TRITON` (False without a Triton or with an unreadable
    version: the doctor's fla rule reports those)."""
    low, high = (release_of(bound) for bound in FLA_BAD_TRITON)
    for name in ("triton", "pytorch-triton"):
        try:
            installed = release_of(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue
        return installed is not None and low <= installed < high
    return False


def tilelang_pins() -> list[str]:
    """The :data:`TILELANG_SET` pins of docker/constraints.txt, in its order."""
    lines = (ROOT / "docker/constraints.txt").read_text().splitlines()
    pins = [line.strip() for line in lines if line.split("==")[0].strip() in TILELANG_SET]
    if len(pins) != len(TILELANG_SET):
        sys.exit(f"install_needs.py: docker/constraints.txt pins {pins}, not the whole TileLang set {TILELANG_SET}")
    return pins


def needs(extras: Sequence[str], hopper_possible: bool = True) -> list[str]:
    """The requirements install.sh installs, in its order (see the module docstring); ``hopper_possible`` False on a
    node whose listed GPUs are all of another generation, which needs no TileLang."""
    wanted: list[str] = unmet([MEGATRON_CORE_PIN])
    if package_needed(extras):
        wanted.append(f"-e .[{','.join(extras)}]" if extras else "-e .")
    if hopper_possible and "gdn" in extras and triton_needs_tilelang():
        wanted += unmet(tilelang_pins())
    return wanted


def repoint_warning(folder: Path) -> str:
    """install.sh's one-line warning, printed right before its ``pip install -e .``, for an environment whose editable
    megatron-oellm is ``folder``, another checkout: the install goes on (a test or CI run in a fresh clone must not
    stop), but whoever shares the environment learns that their jobs now run this checkout."""
    return (f"warning: install.sh: re-pointing this Python's megatron-oellm, an editable install of another checkout "
            f"({folder}), to {ROOT}: every job using this environment runs this checkout's code from now on (re-run "
            f"install.sh in {folder} to point it back, or use a venv of your own: python3 -m venv .venv)")


def main(argv: Sequence[str] | None = None) -> int:
    """Print :func:`needs` for the command line's EXTRAS, one per line; with ``--warn-repoint``, print only
    :func:`repoint_warning` (on stderr) when installing them would re-point another checkout's editable install; with
    ``--provided-by``, only :func:`provided_by` (nothing for None)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extras", help="install.sh's comma-separated EXTRAS (checked against setup.py by it)")
    parser.add_argument("--no-hopper", action="store_true",
                        help="nvidia-smi lists this node's GPUs and none is Hopper: no TileLang set")
    parser.add_argument("--warn-repoint", action="store_true",
                        help="only check: a warning naming the other checkout whose editable install -e . re-points")
    parser.add_argument("--provided-by", action="store_true",
                        help="only say how this checkout is provided: editable, PYTHONPATH, or nothing")
    args = parser.parse_args(argv)
    if args.provided_by:
        print(provided_by() or "")
        return 0
    given = [normalized_extra(extra) for extra in args.extras.split(",") if extra.strip()]
    if args.warn_repoint:
        folder = repointed_folder()
        if folder is not None:
            print(repoint_warning(folder), file=sys.stderr)
        return 0
    lines = needs(given, hopper_possible=not args.no_hopper)
    if lines:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
