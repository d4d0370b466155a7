"""A file of the megatron checkpoint the operating system refuses to write while torch's distributed-checkpoint writer
writes it (hf-to-mcore): a permission (an ACL, a root-squashed or FUSE mount the checks before the conversion could
not see), or another error (a name too long, a folder removed meanwhile). It ended in a traceback naming a file of the
staging directory, which the clean-up had just removed; now one ``oellm convert hf-to-mcore: error:`` line names the
file by its place in ``--out``, the path refused and the system's error (exit status 2), and nothing that could pass
for a checkpoint is left: no ``--out``, no staging directory, a previous output kept as it was. A refusal naming no
file (a failed ``write()`` or ``fsync()``) names the ``release`` folder written; one raised while the input is read
is not the output's.

Tests run as root, whom permissions do not stop: the writer's refusal is simulated at the call of torch's save."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest
from torch.distributed.checkpoint import filesystem

from megatron.oellm.cli import main
from megatron.oellm.convert import dist_ckpt, to_mcore
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import RELEASE
from megatron.oellm.convert.output import staging_directory
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import raised_while_writing

ERRORS = {"permission": [errno.EACCES, errno.EPERM], "other": [errno.ENAMETOOLONG, errno.ENOENT, errno.EISDIR]}
"""Kind of refusal -> the errnos drawn for it."""


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _refuse_a_write(monkeypatch: pytest.MonkeyPatch, number: int, named: bool = True) -> list[Path]:
    """Make torch's save, as the converter calls it, write part of the checkpoint (the common state's file, fresh
    bytes) and then meet the operating system's refusal ``number`` on a later data file, raised as it is or behind the
    ``RuntimeError`` torch's writer raises while handling it. Not ``named``, the refusal names no file, as a failed
    ``write()`` or ``fsync()`` raises it, and the refused path put in the list returned is the folder written;
    else that data file is."""
    refused: list[Path] = []

    def save(*_: object, storage_writer: dist_ckpt.dcp.FileSystemWriter, **__: object) -> None:
        directory = Path(storage_writer.path)
        (directory / f"__0_0{dist_ckpt.DATA_FILE_SUFFIX}").write_bytes(random.randbytes(random.randint(1, 4096)))
        data_file = directory / f"__0_{random.randint(1, 9)}{dist_ckpt.DATA_FILE_SUFFIX}"
        refused.append(data_file if named else directory)
        error = OSError(number, os.strerror(number), *([str(data_file)] if named else []))
        raise random.choice([error, raised_while_writing(number, str(data_file) if named else None)])

    monkeypatch.setattr(dist_ckpt.dcp, "save", save)
    return refused


@pytest.mark.parametrize("kind", list(ERRORS))
@pytest.mark.parametrize("out", ["new", "overwritten"])
def test_a_write_the_system_refuses_is_one_line_and_leaves_no_checkpoint(
        converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str, out: str) -> None:
    card, _, tmp = converted
    target = (tmp / "mcore" if out == "overwritten" else tmp / "new" / "out").resolve()
    previous = _files(tmp / "mcore")
    before = sorted(tmp.iterdir())
    number = random.choice(ERRORS[kind])
    refused = _refuse_a_write(monkeypatch, number)
    status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(target),
                   *(["--overwrite"] if out == "overwritten" else [])])
    stderr = capsys.readouterr().err
    assert refused[0].parent == staging_directory(target) / RELEASE
    fix = (f"; this user may not write there: check the permissions and ACLs of {target.parent} and the mount, or "
           "choose another --out") if kind == "permission" else ""
    assert stderr == (f"oellm convert hf-to-mcore: error: the conversion failed: cannot write {target / RELEASE}/"
                      f"{refused[0].name} ([Errno {number}] {os.strerror(number)}: {refused[0]}, where the output is "
                      f"written beside --out before it is moved in){fix}; the partial output was removed, --out is as "
                      "it was\n")
    assert status == 2
    assert sorted(tmp.iterdir()) == before  # no staging directory, no new --out or parent of it
    assert _files(tmp / "mcore") == previous


@pytest.mark.parametrize("kind", list(ERRORS))
def test_a_refused_write_naming_no_file_names_the_folder_written(
        converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """A failed ``write()`` or ``fsync()`` of torch's writer names no file (a stale NFS handle, a FUSE mount gone):
    it ended in a traceback. Now the one line names the checkpoint folder it was writing, by its place in --out."""
    card, _, tmp = converted
    target = tmp / "mcore"
    previous = _files(target)
    number = random.choice(ERRORS[kind])
    refused = _refuse_a_write(monkeypatch, number, named=False)
    status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(target),
                   "--overwrite"])
    stderr = capsys.readouterr().err
    assert refused[0] == staging_directory(target) / RELEASE
    assert stderr.startswith(f"oellm convert hf-to-mcore: error: the conversion failed: cannot write "
                             f"{target / RELEASE} ([Errno {number}] {os.strerror(number)}: {refused[0]}, ")
    assert stderr.endswith("; the partial output was removed, --out is as it was\n") and stderr.count("\n") == 1
    assert status == 2
    assert not refused[0].parent.exists()
    assert _files(target) == previous


def test_an_unnamed_error_while_the_input_is_read_is_not_the_outputs(converted,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The HF weights are read while torch's writer asks for each unit's tensors: an error naming no file raised
    there is the input's or the code's, and keeps its traceback rather than being named a refused write of the
    output."""
    card, _, tmp = converted
    number = random.choice(ERRORS["other"] + [errno.ESTALE, errno.ENOTCONN])

    def read_unit(*_: object) -> None:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(to_mcore, "hf_to_mcore_unit", read_unit)
    out = tmp / f"out-{random.randrange(10**6)}"
    with pytest.raises(BaseException) as raised:  # DCP wraps it in a CheckpointException (a BaseException)
        main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)])
    assert not isinstance(raised.value, ConversionError), raised.value
    failure = next(iter(raised.value.failures.values()))[0]
    assert isinstance(failure, OSError) and (failure.errno, failure.filename) == (number, None)
    assert not out.exists()


def test_a_write_of_torchs_writer_refused_without_a_name_is_one_line(converted,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through torch's own writer (its write of one item, after the items before it were written for real),
    as DCP passes the failure on: the one line names the ``release`` folder, the partial output is removed."""
    card, _, tmp = converted
    number = random.choice(ERRORS["permission"] + ERRORS["other"] + [errno.ESTALE, errno.ENOTCONN])
    real, failing, calls = filesystem._write_item, random.randint(1, 20), []

    def write_item(*args: object, **kwargs: object) -> object:
        calls.append(None)
        if len(calls) < failing:
            return real(*args, **kwargs)
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(filesystem, "_write_item", write_item)
    out = (tmp / f"out-{random.randrange(10**6)}").resolve()
    before = sorted(tmp.iterdir())
    with pytest.raises(ConversionError) as raised:
        hf_to_mcore_checkpoint(card, tmp / "hf", out)
    assert str(raised.value).startswith(f"the conversion failed: cannot write {out / RELEASE} ([Errno {number}] "
                                        f"{os.strerror(number)}: {staging_directory(out) / RELEASE}, ")
    assert sorted(tmp.iterdir()) == before
