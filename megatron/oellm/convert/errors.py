"""The exception types of checkpoint conversion."""

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
