"""The sixteenth mutation audit's tests of ``oellm``'s stdout handling: the first error writing stdout is the one
reported (a later flush's is another), a closed stdout fails as a closed descriptor does, an error line before the
arguments are parsed names the process's own subcommand, and ``sys.stdout`` is put back as it was given (None for a
closed one) unless the command replaced it."""

from __future__ import annotations

import errno
import io
import os
import sys

import pytest

from megatron.oellm.cli import ClosedStdout, WatchedStdout, main
from megatron.oellm.commands import models


class FailingStdout(io.StringIO):
    """A stdout whose writes fail with ``write_errno`` and whose flush fails with ``flush_errno``."""

    def __init__(self, write_errno: int, flush_errno: int) -> None:
        super().__init__()
        self.write_errno, self.flush_errno = write_errno, flush_errno

    def write(self, text: str) -> int:
        raise OSError(self.write_errno, os.strerror(self.write_errno))

    def flush(self) -> None:
        raise OSError(self.flush_errno, os.strerror(self.flush_errno))


def fail_in_turn(watched: WatchedStdout, calls: str) -> None:
    """Write to or flush ``watched`` in the order ``calls`` spells (``w`` a write, ``f`` a flush), each failing."""
    for call in calls:
        with pytest.raises(OSError):
            watched.write("help text") if call == "w" else watched.flush()


@pytest.mark.parametrize(("first", "later"), [(errno.ENOSPC, errno.EIO), (errno.EIO, errno.ENOSPC)])
def test_the_first_write_or_flush_error_is_the_one_kept(first: int, later: int) -> None:
    """A stream that fails once fails again, often with another error (ENOSPC, then EIO as the disk goes): the
    first is the cause, and the one the error line names."""
    written_first = WatchedStdout(FailingStdout(first, later))
    fail_in_turn(written_first, "wwf")
    assert written_first.error is not None and written_first.error.errno == first
    flushed_first = WatchedStdout(FailingStdout(later, first))
    fail_in_turn(flushed_first, "ffw")
    assert flushed_first.error is not None and flushed_first.error.errno == first


def test_help_names_its_write_error_not_the_flush_after_it(monkeypatch, capsys) -> None:
    """``oellm --help`` whose write fails (ENOSPC) and whose flush then fails too (EIO) names the write's error."""
    monkeypatch.setattr(sys, "stdout", FailingStdout(errno.ENOSPC, errno.EIO))
    assert main(["--help"]) == 1
    assert capsys.readouterr().err == f"oellm: error: cannot write the output to stdout: {os.strerror(errno.ENOSPC)}\n"


def test_a_closed_stdout_fails_as_a_closed_descriptor() -> None:
    with pytest.raises(OSError) as closed:
        ClosedStdout().write("plan")
    assert closed.value.errno == errno.EBADF


def test_help_read_from_the_process_arguments_names_its_subcommand(monkeypatch, capsys) -> None:
    """``main()`` with no arguments reads ``sys.argv``: ``oellm models --help > /dev/full`` names ``oellm models``."""
    monkeypatch.setattr(sys, "argv", ["oellm", "models", "--help"])
    monkeypatch.setattr(sys, "stdout", FailingStdout(errno.ENOSPC, errno.ENOSPC))
    assert main() == 1
    assert capsys.readouterr().err.startswith("oellm models: error: cannot write the output to stdout: ")


def test_a_closed_stdout_is_put_back_as_none(monkeypatch, capsys) -> None:
    """In-process with ``sys.stdout`` None (Python's stand-in for a closed stdout), the stand-in of a closed stream
    is the command's only: the caller gets its None back."""
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["models"]) == 1
    assert sys.stdout is None
    assert capsys.readouterr().err == "oellm models: error: cannot write the output to stdout: stdout is closed\n"


def test_a_stdout_the_command_replaced_is_kept(monkeypatch) -> None:
    """A command that points ``sys.stdout`` elsewhere keeps it: only the wrapper main put in place is taken back."""
    replacement = io.StringIO()

    def replaces_stdout(args: object) -> int:
        sys.stdout = replacement
        return 0

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(models, "run", replaces_stdout)
    assert main(["models"]) == 0
    assert sys.stdout is replacement
