"""A file of the Hugging Face export the operating system refuses to write (mcore-to-hf): the shards are written as
``shard-NNNNN.tmp`` in the staging directory beside ``--out`` and renamed at the end. A refusal naming its file (an
``open()`` refused: a permission, a name too long) and one naming none (a failed ``write()``: a stale NFS handle, a
FUSE mount gone, a full disk) are one ``error:`` line, exit status 2, naming the shard by its place in ``--out`` and
the system's reason, or for the storage's refusals (no room, a quota, a read-only file system) what to do; the partial
output is removed and a previous export kept byte for byte. A failure reading the input is no write of the output.

Tests run as root, whom permissions do not stop: the refusal is simulated at the converter's lowest write,
``safetensors_io._write_tensor``, after the tensors before it were written for real. Fresh random errnos, shard sizes
and the tensor whose write fails."""

from __future__ import annotations

import errno
import io
import os
import random
import re
from pathlib import Path
from typing import BinaryIO

import pytest
from torch import Tensor

from megatron.oellm.cli import main
from megatron.oellm.convert import dist_ckpt, safetensors_io
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.output import staging_directory
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint

REFUSALS = {"permission": [errno.EACCES, errno.EPERM],
            "other": [errno.ENAMETOOLONG, errno.ENOENT, errno.ESTALE, errno.ENOTCONN, errno.EREMOTEIO]}
"""Kind of refusal -> the errnos drawn for it (none of them the storage's, which name no file to fix)."""
PERMISSION_FIX = ("; this user may not write there: check the permissions and ACLs of {parent} and the mount, or "
                  "choose another --out")
"""What the report adds for a permission refused, ``{parent}`` the folder holding ``--out``."""
STORAGE_FIX = {errno.ENOSPC: "free some space there or choose another --out",
               errno.EDQUOT: "free some of this user's quota there or choose another --out",
               errno.EROFS: "(--out {out} lies on a file system mounted read-only); choose another --out"}
"""The storage's refusals a write names no file with -> the end of the report (``{out}``: ``--out``)."""


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _refuse_a_write(monkeypatch: pytest.MonkeyPatch, count: int, number: int, named: bool) -> list[Path]:
    """Make the converter's write of one tensor (a random one of the ``count`` it writes) write part of its bytes and
    then meet the operating system's refusal ``number``, naming the shard file or not, as ``write()`` raises it; the
    tensors before it are written for real. Returns the list the refused shard's path is put in."""
    real, failing, calls = safetensors_io._write_tensor, random.randrange(count), []
    refused: list[Path] = []

    def write_tensor(file: BinaryIO, tensor: Tensor) -> None:
        calls.append(file.name)
        if len(calls) <= failing:
            return real(file, tensor)
        file.write(random.randbytes(random.randint(0, 64)))
        refused.append(Path(file.name))
        raise OSError(number, os.strerror(number), *([file.name] if named else []))

    monkeypatch.setattr(safetensors_io, "_write_tensor", write_tensor)
    return refused


@pytest.mark.parametrize("kind", list(REFUSALS))
@pytest.mark.parametrize("named", [True, False])
@pytest.mark.parametrize("out", ["new", "overwritten"])
def test_a_shard_write_the_system_refuses_names_the_shard_and_keeps_the_previous_export(
        converted, monkeypatch: pytest.MonkeyPatch, kind: str, named: bool, out: str) -> None:
    card, hf, tmp = converted
    target = (tmp / "export" if out == "overwritten" else tmp / "new" / "export").resolve()
    if out == "overwritten":
        mcore_to_hf_checkpoint(card, tmp / "mcore", target, max_shard_bytes=random.randint(1, 500_000))
    previous = _files(target) if target.exists() else None
    before = sorted(tmp.iterdir())
    number = random.choice(REFUSALS[kind])
    refused = _refuse_a_write(monkeypatch, len(hf), number, named)
    with pytest.raises(ConversionError) as raised:
        mcore_to_hf_checkpoint(card, tmp / "mcore", target, overwrite=out == "overwritten",
                               max_shard_bytes=random.randint(1, 500_000))
    assert refused[0].parent == staging_directory(target)
    assert re.fullmatch(r"shard-\d{5}\.tmp", refused[0].name)
    fix = PERMISSION_FIX.format(parent=target.parent) if kind == "permission" else ""
    assert str(raised.value) == (f"the conversion failed: cannot write {target / refused[0].name} ([Errno {number}] "
                                 f"{os.strerror(number)}: {refused[0]}, where the output is written beside --out "
                                 f"before it is moved in){fix}; the partial output was removed, --out is as it was")
    assert sorted(tmp.iterdir()) == before  # no staging directory, no new --out or parent of it
    assert (_files(target) if target.exists() else None) == previous


def test_a_shard_write_refused_without_a_name_is_one_line_of_the_command(
        converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the command: one ``error:`` line, exit status 2 (a refused write that names no file was a traceback,
    or for a permission a line blaming an unnamed path)."""
    card, hf, tmp = converted
    number = random.choice([*REFUSALS["permission"], *REFUSALS["other"]])
    refused = _refuse_a_write(monkeypatch, len(hf), number, named=False)
    target = tmp / f"out-{random.randrange(10**6)}"
    status = main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp / "mcore"),
                   "--out", str(target)])
    stderr = capsys.readouterr().err
    assert stderr.startswith(f"oellm convert mcore-to-hf: error: the conversion failed: cannot write "
                             f"{target / refused[0].name} ([Errno {number}] {os.strerror(number)}: {refused[0]}, ")
    assert stderr.endswith("; the partial output was removed, --out is as it was\n") and stderr.count("\n") == 1
    assert status == 2
    assert not target.exists() and not refused[0].parent.exists()


@pytest.mark.parametrize("number", list(STORAGE_FIX))
def test_no_room_or_a_read_only_file_system_met_writing_a_shard_says_what_to_do(
        converted, monkeypatch: pytest.MonkeyPatch, number: int) -> None:
    """A full disk, a quota or a file system mounted read-only met by ``write()`` (which names no file): the storage's
    refusal in one line, naming the shard it refused, with what to do about it, naming ``--out`` for a read-only
    one."""
    card, hf, tmp = converted
    target = tmp / f"out-{random.randrange(10**6)}"
    refused = _refuse_a_write(monkeypatch, len(hf), number, named=False)
    with pytest.raises(ConversionError) as raised:
        mcore_to_hf_checkpoint(card, tmp / "mcore", target, max_shard_bytes=random.randint(1, 500_000))
    message = str(raised.value)
    assert message.startswith(f"the conversion failed: [Errno {number}] {os.strerror(number)} writing "
                              f"{target / refused[0].name} ({refused[0]}, where the output is written beside --out "
                              "before it is moved in); the partial output was removed, --out is as it was")
    assert message.endswith(STORAGE_FIX[number].format(out=target)), message
    assert not target.exists()


def test_an_unnamed_error_reading_the_checkpoint_is_reported_as_a_read(converted,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An error of the input's file system naming no file while a unit is read (within the conversion's writes) stays
    the reader's report, naming the checkpoint's data files, and is not taken for a refused write of the output."""
    card, _, tmp = converted
    number = random.choice(REFUSALS["other"])
    real = dist_ckpt.GivenMetadataReader.read_data

    def read_data(self: dist_ckpt.GivenMetadataReader, plan: object, planner: object) -> object:
        if not isinstance(planner, dist_ckpt._RegionLoadPlanner):  # the common state, read before the writes
            return real(self, plan, planner)
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(dist_ckpt.GivenMetadataReader, "read_data", read_data)
    kind = type(OSError(number, os.strerror(number))).__name__  # FileNotFoundError for ENOENT, ...
    with pytest.raises(ConversionError, match=rf"^cannot read the checkpoint data in .*\.distcp \({kind}\); the "
                                              rf"checkpoint is damaged \(copy it again\)$"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")


class _StaleFile(io.FileIO):
    """A shard file whose writes past ``limit`` bytes fail with ``ESTALE`` naming no file, every later one too, as
    once an NFS handle is stale: the buffered file's close then flushes into the same failure."""

    limit = 0

    def write(self, data: bytes) -> int:
        if self.tell() + len(data) > self.limit:
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        return super().write(data)


def test_a_write_that_keeps_failing_is_one_line_of_the_command(
        converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A real buffered shard file whose raw writes keep failing: the close of the file the failure left open flushed
    into the same unnamed error, which replaced the named one and ended in a traceback."""
    card, hf, tmp = converted
    _StaleFile.limit = random.randint(1, 20_000)
    opened: list[Path] = []

    def open_stale(path: Path, mode: str = "r") -> io.BufferedWriter:
        assert mode == "wb"
        opened.append(Path(path))
        return io.BufferedWriter(_StaleFile(path, mode), buffer_size=random.choice([64, 8192]))

    monkeypatch.setattr(safetensors_io, "open", open_stale, raising=False)
    target = tmp / f"out-{random.randrange(10**6)}"
    status = main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp / "mcore"),
                   "--out", str(target)])
    stderr = capsys.readouterr().err
    assert status == 2, stderr
    assert stderr.startswith(f"oellm convert mcore-to-hf: error: the conversion failed: cannot write "
                             f"{target / opened[-1].name} ([Errno {errno.ESTALE}] {os.strerror(errno.ESTALE)}: "
                             f"{opened[-1]}, "), stderr
    assert stderr.endswith("; the partial output was removed, --out is as it was\n") and stderr.count("\n") == 1
    assert not target.exists() and not opened[-1].parent.exists()
