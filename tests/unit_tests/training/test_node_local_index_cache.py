"""A multi-node job's index cache folder on a node-local file system: megatron-core 0.19.2's rank 0 writes the
caches on its own node and every other rank reads them from the same path, so the other nodes' ranks find none and
stop when the datasets are built. The entry refuses a folder in node memory (tmpfs, ``/dev/shm``) without caches
and warns of one on a local disk, judged from the mount table (made-up ones here)."""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

import pytest

from megatron.oellm.training import index_cache
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain


def cache_args(data_cache_path: Path | None) -> argparse.Namespace:
    """The arguments :func:`index_cache.check_cache_shared_by_nodes` reads."""
    return argparse.Namespace(data_cache_path=None if data_cache_path is None else str(data_cache_path))


def made_up_table(*mounts: tuple[str, str]) -> list[tuple[str, str]]:
    """A mount table of a root on nfs4 and the given ``(mount point, type)`` mounts after it."""
    return [("/", "nfs4"), *mounts]


def some_folder(parent: str) -> Path:
    """A fresh folder name under ``parent`` that does not exist."""
    return Path(parent, f"cache-{random.randrange(10**6)}", "indices")


def several_nodes() -> int:
    return random.randint(2, 64)


@pytest.mark.parametrize("kind", ["tmpfs", "ramfs"])
def test_a_cache_folder_in_node_memory_is_refused_naming_path_type_and_fix(kind):
    folder, nodes = some_folder("/scratch/fast"), several_nodes()
    with pytest.raises(ValueError) as refusal:
        index_cache.check_cache_shared_by_nodes(cache_args(folder), [], nodes,
                                                made_up_table(("/scratch/fast", kind)))
    message = str(refusal.value)
    assert message.startswith(f"--data-cache-path {folder} is on {kind}, in the memory of each node, in a job of "
                              f"{nodes} nodes")
    assert "FileNotFoundError" in message and "give --data-cache-path DIR, a folder" in message
    assert "every node of the job shares" in message


@pytest.mark.parametrize("table", [[], [("/", "ext4")], [("/", "nfs")]])
def test_a_folder_under_dev_shm_is_refused_whatever_the_table_says(table):
    folder = some_folder("/dev/shm")
    with pytest.raises(ValueError, match=rf"^--data-cache-path {folder} is on /dev/shm \(shared memory\), in the "):
        index_cache.check_cache_shared_by_nodes(cache_args(folder), [], several_nodes(), table)


@pytest.mark.parametrize("kind", ["ext4", "xfs", "btrfs", "overlay", "zfs"])
def test_a_cache_folder_on_a_local_disk_is_a_warning(kind):
    folder, nodes = some_folder("/local/disk"), several_nodes()
    [warning] = index_cache.check_cache_shared_by_nodes(cache_args(folder), [], nodes,
                                                        made_up_table(("/local/disk", kind)))
    assert warning.startswith(f"--data-cache-path {folder} is on {kind}, on the disk of each node, in a job of "
                              f"{nodes} nodes")
    assert "unless the job put the same caches there on every node" in warning


@pytest.mark.parametrize("kind", ["nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "fuse.sshfs", "made-up-fs"])
def test_a_shared_or_unknown_file_system_is_let_through(kind):
    folder = some_folder("/project")
    assert index_cache.check_cache_shared_by_nodes(cache_args(folder), [], several_nodes(),
                                                   [("/", "tmpfs"), ("/project", kind)]) == []


def test_the_innermost_mount_decides():
    """A shared folder mounted inside a local disk's mount point, and the other way round."""
    table = made_up_table(("/scratch", "ext4"), ("/scratch/shared", "lustre"), ("/scratch/shared/ram", "tmpfs"))
    nodes = several_nodes()
    assert index_cache.check_cache_shared_by_nodes(cache_args(some_folder("/scratch/shared")), [], nodes, table) == []
    [warning] = index_cache.check_cache_shared_by_nodes(cache_args(some_folder("/scratch/sharedx")), [], nodes, table)
    assert " is on ext4, " in warning
    with pytest.raises(ValueError, match=" is on tmpfs, "):
        index_cache.check_cache_shared_by_nodes(cache_args(some_folder("/scratch/shared/ram")), [], nodes, table)


def test_one_node_or_no_cache_folder_is_let_through():
    folder, table = some_folder("/dev/shm"), made_up_table(("/dev/shm", "tmpfs"))
    assert index_cache.check_cache_shared_by_nodes(cache_args(folder), [], 1, table) == []
    assert index_cache.check_cache_shared_by_nodes(cache_args(None), [], several_nodes(), table) == []  # mock data


def test_a_folder_in_memory_holding_caches_is_a_warning(tmp_path):
    """Caches already there may have been put on every node by the job: a warning, not a refusal."""
    base = f"{random.randrange(16**8):08x}-GPTDataset-train-"
    for suffix in index_cache.INDEX_CACHE_FILES:
        (tmp_path / f"{base}{suffix}").write_text(base)
    table = [("/", "nfs"), (os.path.realpath(tmp_path), "tmpfs")]
    [warning] = index_cache.check_cache_shared_by_nodes(cache_args(tmp_path), [], several_nodes(), table)
    assert warning.startswith(f"--data-cache-path {tmp_path} is on tmpfs, in the memory of each node")


def test_without_data_cache_path_each_datasets_default_folder_is_judged():
    shared, staged = f"/project/data-{random.randrange(10**6)}/text", f"/dev/shm/data-{random.randrange(10**6)}/text"
    table = made_up_table(("/dev/shm", "tmpfs"))
    assert index_cache.check_cache_shared_by_nodes(cache_args(None), [shared], several_nodes(), table) == []
    with pytest.raises(ValueError) as refusal:
        index_cache.check_cache_shared_by_nodes(cache_args(None), [shared, staged], several_nodes(), table)
    assert str(refusal.value).startswith(f"the index cache folder of dataset {staged!r} (no --data-cache-path), "
                                         f"{index_cache.default_index_cache(staged)}, is on tmpfs")


def test_the_node_count_is_torchruns_group_world_size_else_slurms():
    nodes, other = several_nodes(), several_nodes()
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": str(nodes), "SLURM_NNODES": str(other)}) == nodes
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": "1", "SLURM_NNODES": str(other)}) == 1
    assert index_cache.job_node_count({"SLURM_NNODES": str(other)}) == other
    assert index_cache.job_node_count({"WORLD_SIZE": str(other)}) == 1
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": "two", "SLURM_NNODES": "0"}) == 1


def entry_argv(cache: Path) -> list[str]:
    """A mock-data command line of the entry whose index caches go to ``cache``."""
    return ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--seq-length", "128",
            "--mock-data", "--data-cache-path", str(cache)]


def test_the_entry_refuses_a_multi_node_cache_in_memory(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    cache = tmp_path / "cache"
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "ext4"), (os.path.realpath(tmp_path), "tmpfs")])
    monkeypatch.setenv("GROUP_WORLD_SIZE", str(several_nodes()))
    assert entry.main(entry_argv(cache)) == 2
    assert capsys.readouterr().err.startswith(f"{entry.PROG}: error: --data-cache-path {cache} is on tmpfs")


def test_the_entry_warns_of_a_multi_node_cache_on_a_local_disk_on_rank_0(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    cache = tmp_path / "cache"
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "nfs"), (os.path.realpath(tmp_path), "xfs")])
    monkeypatch.setenv("GROUP_WORLD_SIZE", str(several_nodes()))
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(Reached):
        entry.main(entry_argv(cache))
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: warning: --data-cache-path {cache} is on xfs, on the disk of each node")
    monkeypatch.setenv("RANK", str(random.randint(1, 7)))
    with pytest.raises(Reached):
        entry.main(entry_argv(cache))
    assert capsys.readouterr().err == ""
