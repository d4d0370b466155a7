"""A tokenizer file ``mcore-to-hf --tokenizer DIR`` copies into the export that the operating system refuses to write
or read: one ``error:`` line, exit status 2, naming the file (by its place in ``--out`` for a write, in DIR for a
read), the partial output removed. ``shutil.copyfile`` named a failure of its ``sendfile`` by the tokenizer's file
and one of a ``write`` or ``close`` (a stale NFS handle, which NFS reports at the close) by none, which ended the
conversion in a traceback, or for a permission in a line blaming no path.

Tests run as root, whom permissions do not stop: the refusal is simulated at Python's ``open`` of that one file (the
open of a read, the ``write`` or ``close`` of a write), once the staging directory exists (the check of DIR before
the conversion reads ``tokenizer.json`` too). Fresh random tokenizers, errnos and the file that fails."""

from __future__ import annotations

import builtins
import errno
import io
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.output import staging_directory
from megatron.oellm.convert.tokenizer_files import tokenizer_file_names
from tests.unit_tests.convert.convert_helpers import save_tiny_tokenizer

WRITE_REFUSALS = [errno.ESTALE, errno.ENOTCONN, errno.EREMOTEIO, errno.EPERM, errno.EACCES]
"""Refusals of a write that are not the storage's (those are reported by their number, with what to do)."""
READ_REFUSALS = [errno.ESTALE, errno.ENOTCONN, errno.EIO, errno.EACCES]
"""Refusals of a read of the tokenizer folder, a storage's among them (EIO: the input's disk, not the output's)."""
_TEMPLATES = {"default": "{{ messages }}", "tool_use": "{{ tools }}"}


def _tokenizer(tmp: Path, vocab_size: int) -> tuple[Path, list[str]]:
    """A fresh tiny tokenizer (with named chat templates, so one file lies in a subfolder) in ``tmp``; (its folder,
    its files in the order they are copied)."""
    directory = tmp / f"tok-{random.randrange(10**6)}"
    save_tiny_tokenizer(directory, vocab_size, seed=random.randrange(2**31), chat_template=_TEMPLATES)
    return directory, tokenizer_file_names(directory)


def _fail_opening(monkeypatch: pytest.MonkeyPatch, path: Path, mode: str, opened: Callable[[Path], object],
                  staging: Path) -> None:
    """Make Python's ``open`` of ``path`` in ``mode`` return ``opened(path)`` once ``staging`` exists (everything else
    opens as it would)."""
    real = io.open

    def fake_open(file: object, mode_given: str = "r", *args: object, **kwargs: object) -> object:
        if mode_given == mode and Path(os.fsdecode(file)) == path and staging.exists():
            return opened(path)
        return real(file, mode_given, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)


def _refusing(number: int, when: str) -> Callable[[Path], io.FileIO]:
    """Opens a file for writing whose ``when`` (``write``, or ``close``: after closing, as NFS reports a failed
    flush) fails with ``number``, naming no file, as those calls fail."""
    class Refusing(io.FileIO):
        def write(self, data: object) -> int:
            if when == "write":
                raise OSError(number, os.strerror(number))
            return super().write(data)

        def close(self) -> None:
            was_open = not self.closed
            super().close()
            if when == "close" and was_open:
                raise OSError(number, os.strerror(number))

    return lambda path: Refusing(path, "wb")


def _refused_open(number: int) -> Callable[[Path], object]:
    """An ``open`` the system refuses with ``number``, naming the file."""
    def refuse(path: Path) -> object:
        raise OSError(number, os.strerror(number), str(path))
    return refuse


def _convert(card_name: str, tmp: Path, tokenizer: Path, out: Path) -> int:
    return main(["convert", "mcore-to-hf", "--model", card_name, "--mcore", str(tmp / "mcore"), "--out", str(out),
                 "--tokenizer", str(tokenizer)])


def test_a_tokenizer_file_whose_write_is_refused_is_one_line_naming_it(
        converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    card, _, tmp = converted
    tokenizer, names = _tokenizer(tmp, card.vocab_size)
    name, number, when = random.choice(names), random.choice(WRITE_REFUSALS), random.choice(["write", "close"])
    out = (tmp / f"out-{random.randrange(10**6)}").resolve()
    staging = staging_directory(out)
    _fail_opening(monkeypatch, staging / name, "wb", _refusing(number, when), staging)
    status = _convert(card.name, tmp, tokenizer, out)
    stderr = capsys.readouterr().err
    fix = (f"; this user may not write there: check the permissions and ACLs of {out.parent} and the mount, or "
           "choose another --out" if number in (errno.EPERM, errno.EACCES) else "")
    assert stderr == (f"oellm convert mcore-to-hf: error: the conversion failed: cannot write {out / name} "
                      f"([Errno {number}] {os.strerror(number)}: {staging / name}, where the output is written beside "
                      f"--out before it is moved in){fix}; the partial output was removed, --out is as it was\n")
    assert status == 2
    assert not out.exists() and not staging.exists()


def test_a_tokenizer_file_whose_read_is_refused_during_the_copy_is_one_line_naming_it(
        converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tokenizer folder was checked before the conversion; a read failing since (a network file system) names
    the tokenizer file, not the output's storage."""
    card, _, tmp = converted
    tokenizer, names = _tokenizer(tmp, card.vocab_size)
    name, number = random.choice(names), random.choice(READ_REFUSALS)
    out = (tmp / f"out-{random.randrange(10**6)}").resolve()
    source = tokenizer / name
    _fail_opening(monkeypatch, source, "rb", _refused_open(number), staging_directory(out))
    status = _convert(card.name, tmp, tokenizer, out)
    stderr = capsys.readouterr().err
    assert stderr == (f"oellm convert mcore-to-hf: error: cannot read the tokenizer file {source} of --tokenizer: "
                      f"[Errno {number}] {os.strerror(number)}: '{source}'; the partial output was removed, --out is "
                      "as it was: check the tokenizer folder or pass a copy of it\n")
    assert status == 2
    assert not out.exists() and not staging_directory(out).exists()


def test_no_room_for_a_tokenizer_file_names_it(converted, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk, a quota or a file-size limit met writing a tokenizer file (no file named, as ``write`` and
    ``close`` raise them) is the storage's refusal, naming that file, with what to do."""
    card, _, tmp = converted
    tokenizer, names = _tokenizer(tmp, card.vocab_size)
    name, when = random.choice(names), random.choice(["write", "close"])
    number = random.choice([errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
    out = (tmp / f"out-{random.randrange(10**6)}").resolve()
    staging = staging_directory(out)
    _fail_opening(monkeypatch, staging / name, "wb", _refusing(number, when), staging)
    status = _convert(card.name, tmp, tokenizer, out)
    stderr = capsys.readouterr().err
    assert stderr.startswith(f"oellm convert mcore-to-hf: error: the conversion failed: [Errno {number}] "
                             f"{os.strerror(number)} writing {out / name} ({staging / name}, where the output is "
                             "written beside --out before it is moved in); the partial output was removed, --out is "
                             "as it was (")
    assert stderr.endswith("or choose another --out\n" if number != errno.EFBIG else "--max-shard-size)\n")
    assert stderr.count("\n") == 1 and status == 2
    assert not out.exists() and not staging.exists()
