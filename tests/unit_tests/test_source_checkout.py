"""One rule finds the megatron-oellm source checkout that runs: ``oellm recipe`` (which binds it into a job and puts it
first on the image's ``PYTHONPATH``, and looks for its shipped configs) and ``oellm doctor`` (whose fixes name its
``tools/`` scripts by absolute path) asked two functions with two markers: ``setup.py`` for the recipe, so the
image's build folder (``setup.py`` and ``megatron/``, no ``tools/``) counted as a checkout there and not for the
doctor. A checkout is now the folder above ``megatron/oellm`` that holds ``tools/install.sh``."""

from __future__ import annotations

import random
from pathlib import Path

from megatron.oellm import paths
from megatron.oellm.doctor import probes
from megatron.oellm.paths import CHECKOUT_MARKER, source_checkout
from megatron.oellm.recipes import slurm, toml_loading
from megatron.oellm.training import fla_kernels

REPOSITORY = Path(__file__).resolve().parents[2]


def _tree(root: Path, *files: str) -> Path:
    """A ``megatron/oellm`` package under ``root`` with ``files`` (paths relative to ``root``) beside it; its
    ``megatron/oellm`` folder."""
    package = root / "megatron" / "oellm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "0.{random.randint(1, 99)}.0"\n')
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {random.randrange(10**6)}\n")
    return package


def test_a_folder_with_the_installer_is_a_checkout(tmp_path: Path) -> None:
    root = tmp_path / f"megatron-oellm-{random.randrange(10**6)}"
    assert source_checkout(_tree(root, "setup.py", str(CHECKOUT_MARKER))) == root


def test_a_folder_without_the_installer_is_none(tmp_path: Path) -> None:
    """Also where it holds ``setup.py`` and ``megatron/``, as the image's build folder (/opt/megatron-oellm) does."""
    assert source_checkout(_tree(tmp_path / "opt" / "megatron-oellm", "setup.py", "README.md")) is None
    assert source_checkout(_tree(tmp_path / "bare")) is None
    package = _tree(tmp_path / "folder")
    (tmp_path / "folder" / CHECKOUT_MARKER).mkdir(parents=True)  # a folder of the marker's name
    assert source_checkout(package) is None


def test_an_installed_copy_in_site_packages_is_none(tmp_path: Path) -> None:
    site = tmp_path / "lib" / f"python3.{random.randint(11, 13)}" / "site-packages"
    package = _tree(site, "setup.py", "tools/__init__.py")  # another distribution's stray top-level files
    (site / f"megatron_oellm-0.{random.randint(1, 9)}.0.dist-info").mkdir()
    assert source_checkout(package) is None


def test_a_link_to_a_checkouts_package_finds_the_checkout(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    package = _tree(root, str(CHECKOUT_MARKER))
    (tmp_path / "elsewhere" / "megatron").mkdir(parents=True)
    link = tmp_path / "elsewhere" / "megatron" / "oellm"
    link.symlink_to(package, target_is_directory=True)
    assert source_checkout(link) == root


def test_the_running_code_is_this_repositorys_checkout() -> None:
    assert source_checkout() == REPOSITORY


def test_the_recipe_and_the_doctor_ask_the_one_function() -> None:
    assert slurm.source_checkout is toml_loading.source_checkout is paths.source_checkout
    assert probes.source_checkout is fla_kernels.source_checkout is paths.source_checkout


def test_a_marker_that_cannot_be_looked_at_is_no_checkout(tmp_path, monkeypatch):
    """Fourteenth mutation audit: before Python 3.14 ``is_file`` raises ``PermissionError`` under a folder this user
    may not enter (root enters every folder, so the refusal is the file system's answer, stood in for here)."""
    root = tmp_path / f"checkout{random.randrange(1000)}"
    package = _tree(root, str(CHECKOUT_MARKER))
    is_file = Path.is_file

    def refused(path: Path) -> bool:
        """``Path.is_file``, raising for the marker as under a folder this user may not enter."""
        if path == root.resolve() / CHECKOUT_MARKER:
            raise PermissionError(13, "Permission denied", str(path))
        return is_file(path)

    assert source_checkout(package) == root.resolve()
    monkeypatch.setattr(Path, "is_file", refused)
    assert source_checkout(package) is None
