"""Modules, packages and files located without importing them: what the probes and the NCCL name scan start from."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def module_findable(module: str) -> bool:
    """Whether ``module`` is on ``sys.path``, without importing it (a parent package may be imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def is_file(path: Path) -> bool:
    """``path.is_file()``, False where it cannot be looked at: before Python 3.14 ``is_file`` raises PermissionError
    for a file under a folder this user may not enter (a CUDA_HOME in another group's software tree)."""
    try:
        return path.is_file()
    except OSError:
        return False


def package_folders(module: str) -> list[Path]:
    """The folders of the package ``module`` (one, or several for a namespace package), located without importing it
    (a parent package may be imported); empty where it is not found or is no package."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(folder) for folder in spec.submodule_search_locations]


def module_folder(module: str) -> Path | None:
    """The folder ``module`` would be imported from (the one it was, where it is imported), located without importing
    it: a package's folder (the first of a namespace package's), a single-file or compiled module's parent folder;
    None where it is not found. A copy on PYTHONPATH that shadows an installed one shows here."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent if spec.has_location and spec.origin else None
