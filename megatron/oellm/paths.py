"""File-system questions several start-up checks ask before anything is written, where the running megatron-oellm's
source checkout is, and a file replaced atomically once written. Pure Python."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import megatron.oellm

CHECKOUT_MARKER = Path("tools", "install.sh")
"""The file that marks the root of a megatron-oellm source checkout (a git clone): the installer every checkout
carries and no installed copy does. Neither the wheel in site-packages nor the container image's build folder
(``/opt/megatron-oellm``, which holds ``setup.py`` and ``megatron/`` but no ``tools/``) has it, while the doctor's
fixes name this folder's ``tools/`` scripts and a recipe job puts the checkout on the image's ``PYTHONPATH``."""


def source_checkout(oellm_folder: Path | None = None) -> Path | None:
    """The root of the megatron-oellm source checkout whose ``megatron/oellm`` folder is ``oellm_folder`` (the
    imported ``megatron.oellm``'s where not given), links resolved; None for an installed copy, whose root holds no
    :data:`CHECKOUT_MARKER` (also where that cannot be looked at: a folder this user may not enter)."""
    folder = Path(megatron.oellm.__file__).parent if oellm_folder is None else oellm_folder
    root = folder.resolve().parents[1]
    try:
        return root if (root / CHECKOUT_MARKER).is_file() else None
    except OSError:  # before Python 3.14 is_file raises PermissionError under a folder this user may not enter
        return None


class SymlinkLoopError(ValueError):
    """A path runs into a loop of symbolic links (:func:`resolved_path`); the message is the one Python gave."""


def resolved_path(path: Path) -> Path:
    """``path.resolve()`` (absolute, links followed), raising :class:`SymlinkLoopError` where it or a folder above it
    runs into a loop of symbolic links: Python 3.11 raises ``RuntimeError`` there and 3.12+ ``OSError`` (ELOOP), which
    each caller would otherwise have to catch both of to refuse in one line rather than with a traceback."""
    try:
        return path.resolve()
    except RuntimeError as error:
        raise SymlinkLoopError(str(error)) from error
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise SymlinkLoopError(str(error)) from error


LFS_POINTER_START = b"version https://git-lfs.github.com/spec/v1"
"""How a Git LFS pointer file starts: what ``git clone`` without git-lfs leaves in place of each large file of a
Hugging Face model repository (weights, ``tokenizer.json``)."""

LFS_POINTER_FIX = ("a git clone without git-lfs; run `git lfs pull` in the clone (with git-lfs installed), or "
                   "download the model with `hf download REPO --local-dir DIR`")
"""How a Git LFS pointer file came to be and what replaces it with the file (downloading again with plain git gives
the same pointer)."""


def is_lfs_pointer(path: Path) -> bool:
    """Whether the file ``path`` starts as a Git LFS pointer (:data:`LFS_POINTER_START`); False where it cannot be
    read or is no file."""
    try:
        with open(path, "rb") as file:
            return file.read(len(LFS_POINTER_START)) == LFS_POINTER_START
    except OSError:
        return False


def nearest_existing(path: Path) -> Path:
    """``path`` itself where it exists, else its nearest existing ancestor: what ``mkdir -p`` or ``open`` meets first
    when it creates ``path``, so whether that is a folder and writable decides whether ``path`` can be made. A
    relative ``path`` ends at the current folder at worst, an absolute one at ``/``."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())


def symlink_loop(path: Path) -> OSError | None:
    """The error following ``path`` meets when it, or a folder above it, is a loop of symbolic links (``ELOOP``);
    None otherwise. ``exists`` and ``is_dir`` answer False on such a path, as on a missing one, so checks built on
    them let it through and the read or write behind them fails later."""
    try:
        path.stat()
    except OSError as error:
        return error if error.errno == errno.ELOOP else None
    return None


def replace_atomically(path: str | Path, write: Callable[[str], None]) -> None:
    """Have ``write`` fill a temporary file beside ``path`` (it is given the temporary name), then rename that over
    ``path`` only once complete: a full disk, a lost quota or a killed job mid-write left a truncated file under the
    name, with the earlier good one gone. A symlink at ``path`` keeps pointing at the file (the file it names is
    replaced), and an earlier file's permissions carry over (a group-writable file stays so). The temporary file is
    removed when ``write`` or the rename fails."""
    target = os.path.realpath(path)
    folder, name = os.path.split(target)
    temporary = os.path.join(folder, f".{name}.partial-{os.getpid()}")  # created under the umask, as path would be
    try:
        write(temporary)
        if os.path.exists(target):
            shutil.copymode(target, temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


PSEUDO_FILE_SYSTEMS = frozenset({"autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs",
                                 "devpts", "efivarfs", "fusectl", "mqueue", "nsfs", "proc", "pstore", "securityfs",
                                 "selinuxfs", "sysfs", "tracefs"})
"""Kernel file systems (``/proc``, ``/sys``, their cgroup, debug and security mounts) in which no ordinary folder or
file can be made, root included, though they are mounted read-write and ``os.access`` lets root through."""
MOUNT_TABLE = Path("/proc/self/mounts")

Mounts = list[tuple[str, str]]
"""A mount table as :func:`read_mounts` parses it: ``(mount point, file system type)`` in the table's order."""


def read_mounts() -> Mounts:
    """The mounts of :data:`MOUNT_TABLE`, their escaped mount points decoded (a space is ``\\040``), read once for a
    check that asks about several paths; empty where the table cannot be read (not Linux)."""
    try:
        lines = MOUNT_TABLE.read_text().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3:
            mounts.append((re.sub(r"\\([0-7]{3})", lambda code: chr(int(code[1], 8)), fields[1]), fields[2]))
    return mounts


def file_system_type(path: Path, mounts: Mounts | None = None) -> str | None:
    """The type of the file system holding existing ``path`` (``ext4``, ``proc``, ...): that of the innermost of
    ``mounts`` (read from :data:`MOUNT_TABLE` where not given) whose mount point is ``path`` or lies above it once
    links are resolved. None where the table cannot be read (not Linux)."""
    resolved = os.path.realpath(path)
    found, depth = None, -1
    for point, kind in read_mounts() if mounts is None else mounts:
        inside = point == "/" or resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= depth:  # a later mount on the same point covers the earlier one
            found, depth = kind, len(point)
    return found


def unwritable_reason(directory: Path, mounts: Mounts | None = None) -> str | None:
    """Why this process could not create ``directory`` (with missing parents) and write files into it, judged
    without creating anything on its nearest existing ancestor, as ``os.makedirs`` and ``open`` would meet it: a
    file, a kernel pseudo file system (:data:`PSEUDO_FILE_SYSTEMS`, looked up in ``mounts``, read where not given), a
    read-only mount, or no write permission (which root bypasses, hence the first two); or a loop of symbolic links on
    the way (:func:`symlink_loop`), which ``exists`` takes for a missing folder. None where it could."""
    loop = symlink_loop(directory)
    if loop is not None:
        return f"{directory} runs into a loop of symbolic links ({loop.strerror})"
    existing = nearest_existing(directory)
    if not existing.is_dir():
        return f"{existing} is a file"
    kind = file_system_type(existing, mounts)
    if kind in PSEUDO_FILE_SYSTEMS:
        return f"{existing} is on the kernel's {kind} file system, in which no folder or file can be made"
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        return f"{existing} is on a read-only file system"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"this process's user may not write into {existing}"
    return None


def can_write_into(directory: Path, mounts: Mounts | None = None) -> bool:
    """Whether this process may create ``directory`` (with missing parents) and write files into it
    (:func:`unwritable_reason` finds nothing against it, ``mounts`` read where not given)."""
    return unwritable_reason(directory, mounts) is None
