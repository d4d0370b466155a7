"""A file of the megatron checkpoint the operating system refuses to write while torch's distributed-checkpoint writer
writes it (hf-to-mcore): a permission (an ACL, a root-squashed or FUSE mount the checks before the conversion could
not see), or another error (a name too long, a folder removed meanwhile). It ended in a traceback naming a file of the
staging directory, which the clean-up had just removed; now one ``oellm convert hf-to-mcore: error:`` line names the
file by its place in ``--out``, the path refused and the system's error (exit status 2), and nothing that could pass
for a checkpoint is left: no ``--out``, no staging directory, a previous output kept as it was.

Tests run as root, whom permissions do not stop: the writer's refusal is simulated at the call of torch's save."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert import dist_ckpt
from megatron.oellm.convert.mcore_checkpoint import RELEASE
from megatron.oellm.convert.output import staging_directory
from tests.unit_tests.convert.convert_helpers import raised_while_writing

ERRORS = {"permission": [errno.EACCES, errno.EPERM], "other": [errno.ENAMETOOLONG, errno.ENOENT, errno.EISDIR]}
"""Kind of refusal -> the errnos drawn for it."""


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _refuse_a_write(monkeypatch: pytest.MonkeyPatch, number: int) -> list[Path]:
    """Make torch's save, as the converter calls it, write part of the checkpoint (the common state's file, fresh
    bytes) and then meet the operating system's refusal ``number`` on a later data file, raised as it is or behind the
    ``RuntimeError`` torch's writer raises while handling it. Returns the list the refused path is put in."""
    refused: list[Path] = []

    def save(*_: object, storage_writer: dist_ckpt.dcp.FileSystemWriter, **__: object) -> None:
        directory = Path(storage_writer.path)
        (directory / f"__0_0{dist_ckpt.DATA_FILE_SUFFIX}").write_bytes(random.randbytes(random.randint(1, 4096)))
        refused.append(directory / f"__0_{random.randint(1, 9)}{dist_ckpt.DATA_FILE_SUFFIX}")
        error = OSError(number, os.strerror(number), str(refused[0]))
        raise random.choice([error, raised_while_writing(number, str(refused[0]))])

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
