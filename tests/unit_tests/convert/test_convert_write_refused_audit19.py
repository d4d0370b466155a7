"""Mutation audit 19 of the one-line report of a write of the output the operating system refuses (hf-to-mcore): an
error on a path beside the staging directory but not in it (an input next to ``--out``) is not the output's and keeps
its traceback, rather than being reported as a refused write of the output. Tests run as root:
the refusal is simulated at the call of torch's save. Fresh random errnos, names and bytes."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert import dist_ckpt
from megatron.oellm.convert.mcore_checkpoint import RELEASE

REFUSALS = [errno.ENAMETOOLONG, errno.ENOENT, errno.EISDIR]
"""Errnos of refusals that are neither the storage's (no room, a file-size limit, an I/O error, read-only) nor a
permission (which the command reports in one line wherever it is met)."""


def _refuse(monkeypatch: pytest.MonkeyPatch, number: int, where: object) -> list[str]:
    """Make torch's save, as the converter calls it, write one file of fresh bytes and then raise the operating
    system's refusal ``number`` of the path ``where(directory the writer was given)`` returns. Returns the list the
    refused path is put in."""
    refused: list[str] = []

    def save(*_: object, storage_writer: dist_ckpt.dcp.FileSystemWriter, **__: object) -> None:
        directory = Path(storage_writer.path)
        (directory / f"__0_0{dist_ckpt.DATA_FILE_SUFFIX}").write_bytes(random.randbytes(random.randint(1, 4096)))
        refused.append(str(where(directory)))
        raise OSError(number, os.strerror(number), refused[0])

    monkeypatch.setattr(dist_ckpt.dcp, "save", save)
    return refused


def test_an_error_beside_the_staging_directory_keeps_its_traceback(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    card, _, tmp = converted
    number = random.choice(REFUSALS)
    beside = tmp / f"input-{random.randrange(10**6)}.bin"
    refused = _refuse(monkeypatch, number, lambda _: beside)
    out = tmp / f"out-{random.randrange(10**6)}"
    with pytest.raises(OSError) as raised:
        main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)])
    assert (raised.value.errno, raised.value.filename) == (number, refused[0])
    assert not out.exists()


def test_no_room_on_a_file_of_the_output_is_the_storages_refusal(converted, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk or quota names the file it refused too: it is reported as the storage's refusal, with the room the
    output needs, not as a write of that file to fix; the file is named by its place in --out and as refused."""
    card, _, tmp = converted
    number = random.choice([errno.ENOSPC, errno.EDQUOT])
    name = f"__0_{random.randint(1, 9)}{dist_ckpt.DATA_FILE_SUFFIX}"
    refused = _refuse(monkeypatch, number, lambda directory: directory / name)
    out = tmp / f"out-{random.randrange(10**6)}"
    status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)])
    stderr = capsys.readouterr().err
    assert stderr.startswith(f"oellm convert hf-to-mcore: error: the conversion failed: [Errno {number}] "
                             f"{os.strerror(number)} writing {out / RELEASE / name} ({refused[0]}, where the "
                             "output is written beside --out before it is moved in); ")
    assert "; the partial output was removed, --out is as it was (the output needs about " in stderr
    assert "cannot write" not in stderr
    assert status == 2
    assert not out.exists()
