"""Where a conversion writes: a staging directory beside ``--out``, moved into place only when complete.

The rules protect what a user keeps in ``--out``: a missing or empty directory is filled; a non-empty one only with
``--overwrite``, and only if every entry in it is one the converter writes for that direction (a previous output),
since replacing the output deletes those entries; a file is never replaced. An existing ``--out``, and the entries
``--overwrite`` replaces, must be writable. The rules are applied before the conversion and again when the output is
moved into place (the user may have written there meanwhile). The entries of a previous output are moved aside (a
hidden sibling ``.<name>.replaced-<pid>``) while the new ones are moved in, and deleted only once all are in; a
failed move puts them back, so a previous output is never lost. An ``--out`` that is or holds any input file
(symlinks followed), or an existing one on another file system than its parent (a mount point, which the staging
directory could not be moved into), is refused. The file system must have room for the whole output before anything
is written (a previous output being replaced stays until the new one is complete). SIGTERM / SIGHUP / SIGINT
(Ctrl-C) during the conversion remove the staging directory and end it with :class:`ConversionInterrupted`; a
refusal of the storage (disk full, quota, a file-size limit, an I/O error, a read-only file system) removes it and
ends in a one-line :class:`ConversionError` naming the file it refused where known (a signal arriving during that
clean-up is named in it), as does any other
refusal of the operating system to write a file of the output (a permission, a name too long, a stale NFS handle),
naming the file; the writers give an error naming none (a failed ``write()``) the file they were writing
(:func:`writing_output`). A failed conversion also removes the parent directories of ``--out`` it created.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from torch.distributed.checkpoint.api import CheckpointException

from megatron.oellm.convert.errors import ConversionError, ConversionInterrupted, ConversionWarning, listed
from megatron.oellm.convert.termination import TerminationGuard, guarded
from megatron.oellm.paths import SymlinkLoopError, resolved_path

Foreign = Callable[[Path], list[str]]
"""The names (relative to ``--out``) of what an entry of ``--out`` holds that the conversion does not write: empty
when the entry, and all it holds, is a previous output's (so ``--overwrite`` may replace it). A directory the
conversion writes (hf-to-mcore's ``release``) is looked into, since replacing it deletes everything in it."""
_LISTED = 5
"""Foreign entries named in a refusal (the rest are counted)."""
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
"""Operating-system errors that mean the file system is out of room (disk full, quota)."""
_ROOM_FIX = {errno.ENOSPC: "free some space there", errno.EDQUOT: "free some of this user's quota there"}
"""What to do about each of :data:`_NO_ROOM` (a quota counts this user's files, not the disk's free space)."""
_STORAGE_ERRORS = (*_NO_ROOM, errno.EFBIG, errno.EIO, errno.EROFS)
"""Operating-system errors of the storage, reported in one line with what to do: no room, a file-size limit, an I/O
error, a read-only file system. Others are reported in one line where they refuse a file of the output
(:func:`_output_write_error_behind`), and keep their traceback elsewhere: they are the code's or the inputs'."""
_STAGING_NAME = re.compile(r"\.(?P<name>.+)\.partial-(?P<pid>\d+)")
"""The name :func:`staging_directory` gives: ``.<name of --out>.partial-<process id>``."""
_OS_ERROR_TEXT = re.compile(r"\(os error (\d+)\)")
"""How Rust libraries (safetensors) quote an operating-system error in their exception's text."""


def format_bytes(count: int) -> str:
    """``count`` bytes as a person reads a disk size: ``12.3 GiB``, ``456.0 MiB``, ``789 B``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _missing_directories(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first: what creating ``path`` would create."""
    return list(itertools.takewhile(lambda directory: not directory.exists(), (path, *path.parents)))


def _free_space(out_dir: Path) -> tuple[Path, int]:
    """(nearest existing directory holding ``out_dir``, bytes free on its file system)."""
    missing = _missing_directories(out_dir.parent)
    where = missing[-1].parent if missing else out_dir.parent
    return where, shutil.disk_usage(where).free


def staging_directory(out_dir: Path) -> Path:
    """The hidden sibling of ``out_dir`` this process writes the output into before moving it into place."""
    return out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")


def leftover_staging(out_dir: Path) -> list[Path]:
    """Staging directories of earlier conversions into ``out_dir`` that were killed before they could remove them
    (SIGKILL after a Slurm time limit's grace period, the OOM killer, a node failure), and previous outputs an
    ``--overwrite`` had moved aside (:func:`trash_directory`) when it was killed: hidden siblings of ``out_dir`` that
    hold up to a whole output's disk space."""
    out_dir = resolved_out(out_dir)
    own = {staging_directory(out_dir), trash_directory(out_dir)}
    prefixes = (f".{out_dir.name}.partial-", f".{out_dir.name}.replaced-")
    try:
        siblings = list(out_dir.parent.iterdir()) if out_dir.parent.is_dir() else []
    except OSError:
        return []
    return sorted(p for p in siblings for prefix in prefixes if p.name.startswith(prefix)
                  and p.name[len(prefix):].isdigit() and p not in own and p.is_dir())


def leftover_staging_note(out_dir: Path) -> str:
    """A sentence naming :func:`leftover_staging` of ``out_dir``, or ``""`` if there are none."""
    leftovers = leftover_staging(out_dir)
    if not leftovers:
        return ""
    return (f"partial output(s) of earlier conversions that were killed hold disk space beside --out: "
            f"{listed(leftovers, _LISTED)}; remove them unless a conversion into {out_dir.name} is still running "
            "(a .replaced- one holds the previous output an --overwrite moved aside: check first that --out is "
            "whole)")


def check_free_space(out_dir: Path, needed_bytes: int) -> None:
    """Raise unless the file system that will hold the output of ``out_dir`` has ``needed_bytes`` free: a disk that
    fills hours into a conversion wastes those hours. A previous output in ``out_dir`` does not count as free, since
    it is replaced only once the new output is complete. The refusal names partial outputs killed conversions left
    (hidden directories, easily missed)."""
    where, free = _free_space(out_dir)
    if free < needed_bytes:
        leftovers = leftover_staging_note(out_dir)
        raise ConversionError(f"the output needs about {format_bytes(needed_bytes)} but the file system of {where} has "
                              f"{format_bytes(free)} free (a previous output is replaced only after the new one is "
                              "complete); free some space or choose another --out"
                              + (f"; {leftovers}" if leftovers else ""))


def _errors_behind(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the exceptions behind it: its explicit causes, DCP's per-rank failures and the exception a plain
    ``RuntimeError`` was raised while handling (torch's checkpoint writer turns a failed write into
    ``RuntimeError('[enforce fail ...] unexpected pos ...')``), each once."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, CheckpointException):
            pending += [failure[0] for failure in current.failures.values()]
        pending.append(current.__cause__)
        if type(current) is RuntimeError:
            pending.append(current.__context__)


def storage_error_behind(error: BaseException) -> tuple[int, str] | None:
    """(errno, text) of the storage's refusal (:data:`_STORAGE_ERRORS`) behind a failed conversion
    (:func:`_errors_behind`, and safetensors' ``(os error N)`` texts), or None (a defect of the code, whose traceback
    is the report, or a write of the output refused otherwise: :func:`_output_write_error_behind`)."""
    for current in _errors_behind(error):
        if isinstance(current, OSError) and current.errno in _STORAGE_ERRORS:
            return current.errno, str(current)
        quoted = _OS_ERROR_TEXT.search(str(current))
        if quoted and int(quoted.group(1)) in _STORAGE_ERRORS:
            number = int(quoted.group(1))
            return number, f"[Errno {number}] {os.strerror(number)}"
    return None


@contextmanager
def writing_output(path: Path) -> Iterator[None]:
    """A block writing ``path``, a file or folder of the output: the operating system's errors raised in it that name
    no file (:func:`name_unnamed_errors`) are given ``path``. A failed ``write()``, ``flush()`` or ``fsync()`` (a
    stale NFS handle, a FUSE mount gone) names none, and only a name in the staging directory tells
    :func:`_output_write_error_behind` that it refused the output (one line) and not the code (a traceback)."""
    try:
        yield
    except BaseException as error:
        name_unnamed_errors(error, path)
        raise


def name_unnamed_errors(error: BaseException, path: Path) -> None:
    """Give ``path`` as the file name of each operating-system error behind ``error`` (:func:`_errors_behind`) that
    names none, as Python's ``shutil`` names a failed copy's: the caller knows the error arose writing ``path``. The
    storage's refusals (:data:`_STORAGE_ERRORS`) are named too: their report names the file that did not fit
    (:func:`_storage_refusal_of_file`)."""
    for current in _errors_behind(error):
        if isinstance(current, OSError) and current.errno is not None and current.filename is None:
            current.filename = str(path)


def _output_write_error_behind(error: BaseException, staging: Path) -> OSError | None:
    """The operating system's refusal of a file in ``staging`` (the output being written) behind ``error``
    (:func:`_errors_behind`), or None: a permission, a name too long, a file or folder there removed meanwhile. The
    path is the user's to fix, as for a storage error; torch's checkpoint writer raised it as it was, which ended
    the conversion in a traceback naming a staging file that the clean-up had just removed. An error on a path
    elsewhere (an input, a module) is not the output's and keeps its traceback."""
    root = Path(os.path.abspath(staging))
    for current in _errors_behind(error):
        name = current.filename if isinstance(current, OSError) and current.errno is not None else None
        if isinstance(name, str) and Path(os.path.abspath(name)).is_relative_to(root):
            return current
    return None


def check_output(out_dir: Path, overwrite: bool, foreign_in: Foreign) -> None:
    """Raise unless ``out_dir`` may receive the output: missing, an empty directory, or with ``overwrite`` a directory
    holding only what the conversion writes (``foreign_in`` of each entry empty). A directory holding anything else
    is refused naming it, with or without ``overwrite`` (the user learns at once what stands in the way, not after a
    second try with ``--overwrite``). An existing ``out_dir``, and the entries ``overwrite`` replaces, must be
    writable by this process."""
    try:
        if not out_dir.exists():
            return
        if not out_dir.is_dir():
            raise ConversionError(f"output {out_dir} is a file; pass a directory with --out")
        entries = sorted(out_dir.iterdir())
        foreign = [name for entry in entries for name in foreign_in(entry)]
    except OSError as error:
        raise ConversionError(f"cannot read the output directory {out_dir}: {error}") from error
    if foreign:  # named first, with or without --overwrite: that option would not replace them either
        raise ConversionError(f"output {out_dir} holds {listed(foreign, _LISTED)}, which this conversion "
                              "does not write; --overwrite replaces only a previous output: move them away or choose "
                              "another --out")
    if entries and not overwrite:
        raise ConversionError(f"output {out_dir} holds a previous output of this conversion; pass --overwrite to "
                              "replace it")
    _check_writable(out_dir, entries)


def _check_writable(out_dir: Path, replaced: list[Path]) -> None:
    """Raise unless this process may move entries into the existing ``out_dir`` and move the previous output's
    entries ``replaced`` out of it (a directory among them is renamed and then emptied, which needs its own write
    permission): found before the conversion, not after it (minutes to hours on a real model)."""
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise ConversionError(f"cannot write into the output directory {out_dir} (no write permission for this user, "
                              "or a read-only file system); make it writable (chmod u+w) or choose another --out")
    for entry in replaced:
        if entry.is_dir() and not entry.is_symlink() and not os.access(entry, os.W_OK | os.X_OK):
            raise ConversionError(f"--overwrite cannot replace {entry}: this user may not write to that directory "
                                  "(it is moved away and emptied when the new output is in place); make it writable "
                                  "(chmod u+w) or choose another --out")


def resolved_out(out_dir: Path) -> Path:
    """``--out`` as an absolute path with symbolic links followed: what the checks compare with the inputs and what
    the report names (a Slurm log read later from another folder must say where the output went). A loop of symbolic
    links in it, or in a folder above it, is a one-line :class:`ConversionError` naming ``--out``, not a traceback."""
    try:
        return resolved_path(out_dir)
    except SymlinkLoopError as error:
        raise ConversionError(f"--out {out_dir} runs into a loop of symbolic links ({error}); name the output folder "
                              "by a path without one") from error


def partial_output_of(path: Path) -> tuple[Path, Path, int] | None:
    """(staging directory, the ``--out`` it was for, the process id in its name) if ``path`` is or lies in the
    staging directory of a conversion (:func:`staging_directory`), else None: the partial output a stopped
    conversion leaves when it is killed before it can remove it (SIGKILL, the OOM killer), never a whole one."""
    absolute = Path(os.path.abspath(path))  # ``..`` folded, links kept: the name as given is what tells
    for folder in (absolute, *absolute.parents):
        match = _STAGING_NAME.fullmatch(folder.name)
        if match:
            return folder, folder.with_name(match["name"]), int(match["pid"])
    return None


def check_not_input(out_dir: Path, inputs: Iterable[Path]) -> None:
    """Raise if ``out_dir`` is or holds one of ``inputs`` once symlinks are followed (e.g. a Hugging Face cache
    snapshot whose files link to ``../blobs``): writing the output could delete the input. Also if it lies inside an
    input folder: the HF model folder would then hold a megatron checkpoint, or the checkpoint an HF model."""
    out = resolved_out(out_dir)
    resolved = [(path, path.resolve()) for path in inputs]  # each link followed once, for both checks
    for path, real in resolved:
        if real.is_relative_to(out):
            via = f" (a link to {real})" if real != path.absolute() else ""
            raise ConversionError(f"output {out} would overwrite the input {path}{via}; choose another --out")
    for path, real in resolved:  # after the overwrite check: an --out that is an input is refused as that
        if real.is_dir() and out.is_relative_to(real):
            raise ConversionError(f"output {out} lies inside the input folder {path}: every later copy or upload of "
                                  "that folder would carry the other model's files along; choose an --out outside it")


@contextmanager
def staged_output(out_dir: Path, overwrite: bool, foreign_in: Foreign, needed_bytes: int,
                  guard: TerminationGuard | None = None) -> Iterator[Path]:
    """A fresh staging directory beside ``out_dir`` (``--out`` as :func:`resolved_out` gives it) to write the output
    (about ``needed_bytes``) into, moved into ``out_dir`` when the block succeeds and removed when it fails, is refused
    at the end or is stopped by SIGTERM / SIGHUP / SIGINT (see module doc). ``guard`` is the conversion's own, entered
    before its checks; without one the block enters its own."""
    with guarded(guard) as guard:
        check_output(out_dir, overwrite, foreign_in)
        staging = staging_directory(out_dir)
        created = _missing_directories(out_dir.parent)
        guard.writing(lambda: _remove_partial(staging, created))
        try:
            _make_staging(staging, out_dir)
            _check_same_file_system(staging, out_dir)
            check_free_space(out_dir, needed_bytes)  # after: an unwritable place is named as such
            yield staging
            with guard.deferred(out_dir):
                check_output(out_dir, overwrite, foreign_in)
                _commit_output(staging, out_dir, foreign_in)
        except BaseException as error:
            guard.defer_for_cleanup()
            if not isinstance(error, _PreviousOutputAside):  # then staging holds part of the new output
                _remove_partial(staging, created)
            if guard.received is not None and isinstance(error, _PreviousOutputAside):  # its message says where
                raise ConversionInterrupted(guard.received, failure=str(error)) from error  # each part went
            reported = _failure_of(error, staging, out_dir, needed_bytes)
            stop = guard.interrupted(reported) or reported  # the signal's, or the error with a later signal named
            if stop is error:
                raise
            raise stop from error


def _failure_of(error: BaseException, staging: Path, out_dir: Path, needed_bytes: int) -> BaseException:
    """What a conversion writing into ``staging`` that ``error`` ended reports when no signal ended it first: the
    storage's refusal as one line (:func:`_system_failure`), a write of the output refused otherwise as one line
    (:func:`_write_failure`), else ``error`` itself."""
    if isinstance(error, (ConversionError, KeyboardInterrupt)):
        return error
    failure = storage_error_behind(error)
    refused = _output_write_error_behind(error, staging)
    if failure is not None:
        if refused is not None and refused.errno == failure[0]:  # the file it refused is known
            failure = (failure[0], _storage_refusal_of_file(refused, staging, out_dir))
        return _system_failure(failure, out_dir, needed_bytes)
    return error if refused is None else _write_failure(refused, staging, out_dir)


def _remove_partial(staging: Path, created: list[Path]) -> None:
    """Remove the staging directory of a failed or stopped conversion and the parents of ``--out`` it created."""
    shutil.rmtree(staging, ignore_errors=True)
    _remove_if_empty(created)


def _system_failure(failure: tuple[int, str], out_dir: Path, needed_bytes: int) -> ConversionError:
    """The one-line error for the storage's refusal during the conversion (see :func:`storage_error_behind`)."""
    number, text = failure
    message = f"the conversion failed: {text}; the partial output was removed, --out is as it was"
    if number in _NO_ROOM:
        where, free = _free_space(out_dir)
        message += (f" (the output needs about {format_bytes(needed_bytes)}; the file system of {where} has "
                    f"{format_bytes(free)} free now); {_ROOM_FIX[number]} or choose another --out")
        leftovers = leftover_staging_note(out_dir)
        message += f"; {leftovers}" if leftovers else ""
    elif number == errno.EROFS:
        message += f" (--out {out_dir} lies on a file system mounted read-only); choose another --out"
    elif number == errno.EFBIG:
        message += (" (one file may not grow that large there: see `ulimit -f` and the file system's largest file; "
                    "mcore-to-hf writes smaller files with --max-shard-size)")
    return ConversionError(message)


def _storage_refusal_of_file(refused: OSError, staging: Path, out_dir: Path) -> str:
    """The text of the storage's refusal ``refused`` of a file in ``staging``: the system's error and the file, by its
    place in ``out_dir`` and by the path refused, as :func:`_write_failure` names it. A full disk or a file-size limit
    says so of any file; which one it refused tells which part of the output did not fit (a shard, a unit's file)."""
    return (f"[Errno {refused.errno}] {refused.strerror} writing {_place_in_out(refused, staging, out_dir)} "
            f"({refused.filename}, where the output is written beside --out before it is moved in)")


def _place_in_out(refused: OSError, staging: Path, out_dir: Path) -> Path:
    """Where the file ``refused`` names in ``staging`` is to be in ``out_dir`` once the output is moved in."""
    return out_dir / Path(os.path.abspath(refused.filename)).relative_to(os.path.abspath(staging))


def _write_failure(refused: OSError, staging: Path, out_dir: Path) -> ConversionError:
    """The one-line error for the operating system's refusal ``refused`` of a file in ``staging`` (see
    :func:`_output_write_error_behind`): the file by its place in ``out_dir`` and by the path refused, and the
    system's error; for a permission, what to check."""
    message = (f"the conversion failed: cannot write {_place_in_out(refused, staging, out_dir)} "
               f"([Errno {refused.errno}] {refused.strerror}: "
               f"{refused.filename}, where the output is written beside --out before it is moved in)")
    if isinstance(refused, PermissionError):
        message += (f"; this user may not write there: check the permissions and ACLs of {staging.parent} and the "
                    "mount, or choose another --out")
    return ConversionError(f"{message}; the partial output was removed, --out is as it was")


def _remove_if_empty(directories: list[Path]) -> None:
    """Remove the ``directories`` (deepest first) a failed conversion created, where still empty."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:
            return


def _make_staging(staging: Path, out_dir: Path) -> None:
    """Create ``staging`` (and missing parents) afresh; an unwritable place is a :class:`ConversionError`."""
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
    except OSError as error:
        raise ConversionError(f"cannot write the output {out_dir}: {error}") from error


def file_system_of(path: Path) -> int:
    """The device number of the file system holding ``path``."""
    return path.stat().st_dev


def _check_same_file_system(staging: Path, out_dir: Path) -> None:
    """Raise if an existing ``out_dir`` is on another file system than its sibling ``staging`` (a mount point: a
    container's bind mount, a job's scratch mount): the finished output could not be renamed into it, and a previous
    output there would already be deleted when the move fails; the free-space check would also look at the wrong
    file system."""
    if out_dir.is_dir() and file_system_of(out_dir) != file_system_of(staging):
        raise ConversionError(f"output {out_dir} is on another file system than {out_dir.parent} (a mount point), so "
                              "the output written beside it could not be moved into it; pass a directory inside it "
                              f"with --out (e.g. {out_dir / 'converted'})")


class _PreviousOutputAside(ConversionError):
    """Moving the new output into ``--out`` failed and so did putting the previous output back: nothing may be
    deleted, the message says where each part is."""


def trash_directory(out_dir: Path) -> Path:
    """The hidden sibling of ``out_dir`` a previous output is moved into while the new one is moved in (beside the
    staging directory, so on its file system: each move is a rename); deleted once the new output is in place."""
    return out_dir.with_name(f".{out_dir.name}.replaced-{os.getpid()}")


def _commit_output(staging: Path, out_dir: Path, foreign_in: Foreign) -> None:
    """Move the finished ``staging`` directory to ``out_dir``: in place of a missing ``out_dir``, else entry by entry
    after moving the entries of a previous output (those ``foreign_in`` finds nothing foreign in) aside into
    :func:`trash_directory` (the directory itself stays, e.g. a shell's current one, and nothing else in it is
    touched). The previous output is deleted only once every new entry is in; a failed move puts it back first."""
    if not out_dir.exists():
        try:
            staging.rename(out_dir)
        except OSError as error:
            raise ConversionError(f"cannot move the output into {out_dir}: {error}; --out is as it was and the new "
                                  "output was removed") from error
        return
    trash = trash_directory(out_dir)
    try:
        previous = [entry.name for entry in out_dir.iterdir() if not foreign_in(entry)]
        trash.mkdir()
    except OSError as error:
        raise ConversionError(f"cannot move the output into {out_dir}: {error}; --out is as it was and the new "
                              "output was removed") from error
    aside: list[str] = []
    moved_in: list[str] = []
    try:
        for name in previous:
            (out_dir / name).rename(trash / name)
            aside.append(name)
        for entry in sorted(staging.iterdir()):
            entry.rename(out_dir / entry.name)
            moved_in.append(entry.name)
    except OSError as error:
        _undo_commit(error, staging, out_dir, trash, aside, moved_in)
    _delete_replaced(trash, staging)


def _undo_commit(error: OSError, staging: Path, out_dir: Path, trash: Path, aside: list[str],
                 moved_in: list[str]) -> NoReturn:
    """After ``error`` stopped :func:`_commit_output`, move the new entries ``moved_in`` back into ``staging`` and the
    previous output's entries ``aside`` back from ``trash`` into ``out_dir``, then raise the error saying so (the
    caller removes ``staging``). If that fails too, nothing is deleted and the error names where each part is."""
    try:
        for name in reversed(moved_in):
            (out_dir / name).rename(staging / name)
        for name in reversed(aside):
            (trash / name).rename(out_dir / name)
        trash.rmdir()
    except OSError as undo_error:
        raise _PreviousOutputAside(
            f"cannot move the output into {out_dir}: {error}; putting the previous output back failed too "
            f"({undo_error}). Nothing was deleted: the previous output's entries missing from {out_dir} are in "
            f"{trash}, the new output's entries missing from {out_dir} are in {staging}; move them by hand") from error
    raise ConversionError(f"cannot move the output into {out_dir}: {error}; the previous output is back in place, "
                          "unchanged, and the new output was removed") from error


def _delete_replaced(trash: Path, staging: Path) -> None:
    """Delete ``trash`` (the previous output) and the emptied ``staging`` once the new output is in place; one that
    cannot be deleted is a warning naming it (the new output is complete, the conversion succeeded)."""
    for directory in (trash, staging):
        try:
            shutil.rmtree(directory)
        except OSError as error:
            warnings.warn(f"the new output is in place, but {directory} could not be deleted ({error}); delete it to "
                          "free its disk space", ConversionWarning, stacklevel=2)
