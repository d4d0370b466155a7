"""A ``--save`` this job cannot write: megatron-core 0.19.2 creates the folder, and writes into it, only at its first
save, after ``--save-interval`` iterations of training, which are then lost. The entry refuses, before Megatron
initialises and without creating anything, a ``--save`` under a kernel pseudo file system (``/proc``, ``/sys``,
where even root, whom ``os.access`` lets through, can make nothing), on a read-only mount, or in a folder of
another user."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from megatron.oellm import paths
from megatron.oellm.paths import can_write_into, file_system_type, unwritable_reason
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, Reached, entry_up_to_pretrain, refused_line


def _save(save: str) -> list[str]:
    return [*TINY_MOE_RUN, "--save", save, "--save-interval", str(random.randint(2, 9))]


@pytest.mark.parametrize(("save", "existing", "kind"), [
    (f"/proc/oellm_ckpt_{random.randint(0, 10**6)}", "/proc", "proc"),
    (f"/sys/kernel/oellm_{random.randint(0, 10**6)}/run", "/sys/kernel", "sysfs"),
])
def test_a_save_on_a_pseudo_file_system_is_refused(save, existing, kind, monkeypatch, capsys):
    """What megatron's first save does there (``os.makedirs``) fails; the entry says so before training."""
    if file_system_type(Path(existing)) != kind:
        pytest.skip(f"{existing} is not a {kind} mount here")
    with pytest.raises(OSError):
        os.makedirs(save)  # megatron-core's ensure_directory_exists at its first save
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, _save(save))
    assert f"error: --save {save} cannot be written: {existing} is on the kernel's {kind} file system" in line
    assert line.endswith("give a folder this job can write")
    assert not Path(save).exists()


def test_a_writable_save_goes_on_and_nothing_is_created(tmp_path, monkeypatch):
    save = tmp_path / f"runs/run-{random.randint(0, 999)}"
    with pytest.raises(Reached):
        entry_up_to_pretrain(monkeypatch).main(_save(str(save)))
    assert not (tmp_path / "runs").exists()


def test_a_read_only_mount_is_named(tmp_path, monkeypatch):
    """A read-only project folder (statvfs's read-only flag, which root cannot write through either)."""
    real = os.statvfs

    def read_only(path):
        result = real(path)
        if Path(path) == tmp_path:
            return os.statvfs_result((*result[:8], result.f_flag | os.ST_RDONLY, *result[9:]))
        return result

    monkeypatch.setattr(os, "statvfs", read_only)
    assert unwritable_reason(tmp_path / "ckpt" / "run") == f"{tmp_path} is on a read-only file system"
    assert not can_write_into(tmp_path / "ckpt")


def test_a_folder_without_write_permission_is_named(tmp_path, monkeypatch):
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path and real(path, mode))
    assert unwritable_reason(tmp_path / "ckpt") == f"this process's user may not write into {tmp_path}"
    assert unwritable_reason(tmp_path.parent / "elsewhere") is None


def test_the_innermost_mount_decides(tmp_path, monkeypatch):
    """The mount table's escaped mount points (a space is \\040) and a later mount over an earlier one."""
    spaced = tmp_path / "my data"
    (spaced / "inner").mkdir(parents=True)
    escaped = str(spaced).replace(" ", "\\040")
    table = tmp_path / "mounts"
    table.write_text(f"/dev/vda / ext4 rw 0 0\nproc {escaped} proc rw 0 0\ntmpfs {escaped} tmpfs rw 0 0\n"
                     f"sysfs {escaped}/inner sysfs rw 0 0\n")
    monkeypatch.setattr(paths, "MOUNT_TABLE", table)
    assert file_system_type(spaced) == "tmpfs"
    assert file_system_type(spaced / "inner") == "sysfs"
    assert file_system_type(tmp_path) == "ext4"
    assert unwritable_reason(spaced / "inner" / "ckpt").startswith(f"{spaced / 'inner'} is on the kernel's sysfs")
    monkeypatch.setattr(paths, "MOUNT_TABLE", tmp_path / "missing")
    assert file_system_type(spaced) is None


@pytest.mark.parametrize("below", [0, 1, 2])
def test_a_folder_through_a_symlink_loop_is_named_as_one(below, tmp_path):
    """``exists`` answers False on a loop of symbolic links, so its nearest existing ancestor, a writable folder,
    passed: ``--tensorboard-dir``, ``--data-cache-path`` and a recipe's run directory through a loop were let
    through and failed when made. The loop is named, at the folder or deeper below it."""
    loop = tmp_path / f"loop{random.randrange(1, 1000)}"
    loop.symlink_to(loop.name)
    folder = loop.joinpath(*(f"part{index}" for index in range(below)))
    assert unwritable_reason(folder) == f"{folder} runs into a loop of symbolic links (Too many levels of symbolic links)"
    assert not can_write_into(folder)
