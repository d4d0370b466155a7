"""The exception types of checkpoint conversion, and the refusals of inputs this user may not read."""

import os
import signal
from collections.abc import Sequence
from pathlib import Path


class ConversionError(ValueError):
    """A checkpoint cannot be converted: missing tensor, wrong shape, bad path. The message names the tensor/fix."""

    exit_status = 2
    """Exit status of ``oellm convert`` for this error (2: bad input, as argparse uses)."""


class ConversionWarning(UserWarning):
    """What a conversion tells the user and goes on with (a lossy norm shift, NaN weights, a tokenizer that covers
    few rows, an old output left behind). A category of its own, so that ``oellm convert`` shows it under a warnings
    filter a job script sets for the libraries' noise (``PYTHONWARNINGS=ignore``, ``-W ignore::UserWarning``)."""


class ConversionInterrupted(ConversionError):
    """SIGTERM, SIGHUP or SIGINT (``scancel``, a Slurm time limit, a closed terminal, Ctrl-C) stopped a conversion."""

    def __init__(self, signum: int, output_complete: bool = False, nothing_written: bool = False,
                 failure: str | None = None, output_in_place: Path | None = None) -> None:
        """``failure``: the message of an error that ended the conversion as the signal arrived and says itself what
        became of ``--out`` (a failed move that left the previous output aside); kept, with the signal named.
        ``output_in_place``: the finished output, in place before the signal arrived (e.g. while the summary was
        printed)."""
        name = signal.Signals(signum).name
        if failure is not None:
            message = f"{failure} ({name} also arrived meanwhile)"
        elif output_in_place is not None:
            message = (f"{name} arrived after the output was moved into place; the output in {output_in_place} is "
                       "complete")
        elif output_complete:
            message = f"{name} arrived while the finished output was moved into place; the output is complete"
        elif nothing_written:  # during the checks, before the staging directory was made
            message = f"stopped by {name} before anything was written; --out is as it was"
        else:
            message = f"stopped by {name}; the partial output was removed, --out is as it was"
        super().__init__(message)
        self.exit_status = 128 + signum
        """The shell's status of a process ended by the signal."""


def listed(items: Sequence[object], limit: int) -> str:
    """The first ``limit`` of ``items``, comma-separated, then `` and N more`` for the rest: a refusal names a few
    paths or entries, not a whole directory listing."""
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(map(str, items[:limit])) + more


def no_read_permission(path: Path) -> ConversionError:
    """The refusal of an input file that exists but this user may not read (a shared Hugging Face cache or checkpoint
    folder written under another user's umask): the reading libraries call such a file missing (safetensors) or fail
    on it half-way through (DCP), where the user was told to copy a complete file again."""
    return ConversionError(f"cannot read {path}: no read permission (e.g. a shared cache or checkpoint written with "
                           "another user's umask); make it readable (chmod a+r) or convert a copy")


_FOLDER_PERMISSIONS = {"read": (os.R_OK, "list", "r"), "search": (os.X_OK, "enter", "x")}
"""Permission of a folder -> (``os.access`` mode, what it lets a user do, its ``chmod`` letter)."""


def check_folder_access(directory: Path, named: str, lists: bool = False) -> None:
    """Raise naming the input folder ``directory`` (``named``: how the refusal names it, e.g. ``--hf DIR``) when this
    user may not enter it or a folder above it, or, where the conversion ``lists`` its entries (the weights of
    ``--hf`` are found so), may not list it: Python 3.11's ``Path.is_file`` / ``exists`` / ``is_dir`` raise
    ``PermissionError`` there rather than answer, which ended the conversion in a traceback, and an unlistable folder
    looked empty. A missing path, or one that is no folder, passes: the callers' own checks name those."""
    try:
        is_folder = directory.is_dir()
    except PermissionError:
        raise ConversionError(f"{named}: this user may not enter {_unsearchable_folder_above(directory)} (no search "
                              "permission); make it searchable (chmod a+x) or pass a copy") from None
    if not is_folder:
        return
    missing = [kind for kind in (("read", "search") if lists else ("search",))
               if not os.access(directory, _FOLDER_PERMISSIONS[kind][0])]
    if missing:
        verbs = " or ".join(_FOLDER_PERMISSIONS[kind][1] for kind in missing)
        letters = "".join(_FOLDER_PERMISSIONS[kind][2] for kind in missing)
        fix = "readable" if "read" in missing else "searchable"
        raise ConversionError(f"{named}: this user may not {verbs} that folder (no {' or '.join(missing)} "
                              f"permission); make it {fix} (chmod a+{letters}) or pass a copy")


def _unsearchable_folder_above(path: Path) -> str:
    """The folder nearest the root among those above ``path`` that this user may not enter, as a refusal names it;
    a folder on the way in general where none of them is (a link on the way leads elsewhere)."""
    above = reversed(Path(os.path.abspath(path)).parents)
    blocked = next((folder for folder in above if not os.access(folder, os.X_OK)), None)
    return "a folder on its way" if blocked is None else f"{blocked}, a folder above it"
