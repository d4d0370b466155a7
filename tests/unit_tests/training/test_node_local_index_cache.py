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


def cache_args(data_cache_path: Path | None, object_storage_cache_path: Path | None = None) -> argparse.Namespace:
    """The arguments :func:`index_cache.check_cache_shared_by_nodes` reads."""
    return argparse.Namespace(data_cache_path=None if data_cache_path is None else str(data_cache_path),
                              object_storage_cache_path=(None if object_storage_cache_path is None
                                                         else str(object_storage_cache_path)))


def made_up_table(*mounts: tuple[str, str]) -> list[tuple[str, str]]:
    """A mount table of a root on nfs4 and the given ``(mount point, type)`` mounts after it."""
    return [("/", "nfs4"), *mounts]


def some_folder(parent: str) -> Path:
    """A fresh folder name under ``parent`` that does not exist."""
    return Path(parent, f"cache-{random.randrange(10**6)}", "indices")


def several_nodes() -> int:
    return random.randint(2, 64)


def torchrun_on_several_nodes(monkeypatch: pytest.MonkeyPatch) -> int:
    """Set the environment torchrun gives a rank of a job on several nodes (agents, ranks per node, ranks: consistent,
    whatever the shell running the tests exports); return the node count."""
    nodes, per_node = several_nodes(), random.randint(1, 8)
    monkeypatch.setenv("GROUP_WORLD_SIZE", str(nodes))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(per_node))
    monkeypatch.setenv("WORLD_SIZE", str(nodes * per_node))
    return nodes


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


def test_a_two_node_job_is_judged_as_any_multi_node_job():
    """Two nodes are already more than one: the other node's ranks find no caches."""
    with pytest.raises(ValueError, match=r" is on tmpfs, in the memory of each node, in a job of 2 nodes: "):
        index_cache.check_cache_shared_by_nodes(cache_args(some_folder("/dev/shm")), [], 2,
                                                made_up_table(("/dev/shm", "tmpfs")))


def test_dev_shm_itself_is_node_memory(monkeypatch):
    """The shared-memory folder itself, not only a folder under it, is in each node's memory (its caches asked of a
    stand-in: the real /dev/shm is this machine's)."""
    monkeypatch.setattr(index_cache, "lacks_index_cache", lambda folder: True)
    with pytest.raises(ValueError, match=r"^--data-cache-path /dev/shm is on /dev/shm \(shared memory\), in the "):
        index_cache.check_cache_shared_by_nodes(cache_args(Path("/dev/shm")), [], several_nodes(), made_up_table())


def test_a_link_into_dev_shm_is_judged_where_it_leads(tmp_path):
    """A cache folder reached through a link into /dev/shm is in node memory, as the ranks writing there find it."""
    link = tmp_path / f"cache-{random.randrange(10**6)}"
    link.symlink_to(some_folder("/dev/shm"))
    with pytest.raises(ValueError, match=rf"^--data-cache-path {link} is on /dev/shm \(shared memory\), in the "):
        index_cache.check_cache_shared_by_nodes(cache_args(link), [], several_nodes(), made_up_table())


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


def test_a_dataset_named_twice_in_the_blend_is_warned_of_once():
    """A blend that names a local-disk dataset twice (two weights of one corpus) has one cache folder: one warning."""
    prefix = f"/local/disk/data-{random.randrange(10**6)}/text"
    twice = [prefix] * random.randint(2, 5)
    [warning] = index_cache.check_cache_shared_by_nodes(cache_args(None), twice, several_nodes(),
                                                        made_up_table(("/local/disk", "ext4")))
    assert warning.startswith(f"the index cache folder of dataset {prefix!r} (no --data-cache-path), "
                              f"{index_cache.default_index_cache(prefix)}, is on ext4, on the disk of each node")


def test_the_node_count_is_torchruns_group_world_size_else_slurms():
    nodes, other = several_nodes(), several_nodes()
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": str(nodes), "SLURM_NNODES": str(other)}) == nodes
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": "1", "SLURM_NNODES": str(other)}) == 1
    assert index_cache.job_node_count({"SLURM_NNODES": str(other), "WORLD_SIZE": str(other * 4)}) == other
    assert index_cache.job_node_count({"WORLD_SIZE": str(other)}) == 1
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": "two", "SLURM_NNODES": "0"}) == 1


def test_a_single_process_in_a_multi_node_allocation_is_one_node():
    """An ``salloc -N2`` shell exports ``SLURM_NNODES=2`` to every process started in it, torchrun-less ones too: a
    single-process run there (WORLD_SIZE 1 or unset) was taken for a 2-node job, and its ``/dev/shm`` cache refused.
    The ranks span no more nodes than there are ranks."""
    nodes = several_nodes()
    allocation = {"SLURM_NNODES": str(nodes)}
    assert index_cache.job_node_count(allocation) == 1
    assert index_cache.job_node_count({**allocation, "WORLD_SIZE": "1"}) == 1
    ranks = random.randint(2, nodes)
    assert index_cache.job_node_count({**allocation, "WORLD_SIZE": str(ranks)}) == ranks
    assert index_cache.job_node_count({**allocation, "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}) == 1


def test_without_torchruns_group_size_the_nodes_are_the_ranks_over_the_ranks_per_node():
    """torchrun's ``GROUP_WORLD_SIZE`` wins; without it, ``WORLD_SIZE`` over ``LOCAL_WORLD_SIZE`` (rounded up: a last
    node with fewer ranks is a node), not the allocation's ``SLURM_NNODES``."""
    per_node, nodes = random.randint(1, 8), several_nodes()
    world_size = per_node * (nodes - 1) + random.randint(1, per_node)
    launcher = {"WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(per_node),
                "SLURM_NNODES": str(nodes + random.randint(1, 64))}
    assert index_cache.job_node_count(launcher) == nodes
    groups = random.randint(1, world_size - per_node + 1)  # as many agents as the ranks can fill, this one per_node
    assert index_cache.job_node_count({**launcher, "GROUP_WORLD_SIZE": str(groups)}) == groups


def test_torchruns_group_world_size_claims_no_more_nodes_than_the_ranks_fill():
    """torchrun's agents may start different ``--nproc-per-node`` (its ranks are the sum of theirs), so
    ``GROUP_WORLD_SIZE`` may pass ``WORLD_SIZE`` over this node's ``LOCAL_WORLD_SIZE`` and is taken as it is; but each
    agent holds a rank, so an inconsistent environment's count above ``WORLD_SIZE`` less this node's other ranks (or
    above ``WORLD_SIZE`` without ``LOCAL_WORLD_SIZE``) is cut to that, and one without ``WORLD_SIZE`` is taken as it
    is."""
    here, others = random.randint(1, 8), [random.randint(1, 8) for _ in range(several_nodes() - 1)]
    world_size = here + sum(others)
    agents = {"GROUP_WORLD_SIZE": str(len(others) + 1), "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(here)}
    assert index_cache.job_node_count(agents) == len(others) + 1
    claimed = world_size - here + 1 + random.randint(1, 64)
    assert index_cache.job_node_count({**agents, "GROUP_WORLD_SIZE": str(claimed)}) == world_size - here + 1
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": str(world_size + random.randint(1, 64)),
                                       "WORLD_SIZE": str(world_size)}) == world_size
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": str(claimed), "WORLD_SIZE": str(here),
                                       "LOCAL_WORLD_SIZE": str(here + random.randint(1, 8))}) == 1
    assert index_cache.job_node_count({"GROUP_WORLD_SIZE": str(claimed), "SLURM_NNODES": "1"}) == claimed


def test_the_entry_lets_a_single_process_in_a_multi_node_allocation_cache_in_memory(monkeypatch, capsys, tmp_path):
    """A single-process run in an ``salloc -N2`` shell with its caches in node memory reaches megatron's pretrain."""
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "ext4"), (os.path.realpath(tmp_path), "tmpfs")])
    for name in ("GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NNODES", str(several_nodes()))
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(Reached):
        entry.main(entry_argv(tmp_path / "cache"))
    assert capsys.readouterr().err == ""


def entry_argv(cache: Path) -> list[str]:
    """A mock-data command line of the entry whose index caches go to ``cache``."""
    return ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128",
            "--mock-data", "--data-cache-path", str(cache)]


def test_the_entry_refuses_a_multi_node_cache_in_memory(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    cache = tmp_path / "cache"
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "ext4"), (os.path.realpath(tmp_path), "tmpfs")])
    torchrun_on_several_nodes(monkeypatch)
    assert entry.main(entry_argv(cache)) == 2
    assert capsys.readouterr().err.startswith(f"{entry.PROG}: error: --data-cache-path {cache} is on tmpfs")


def test_the_entry_warns_of_a_multi_node_cache_on_a_local_disk_on_rank_0(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    cache = tmp_path / "cache"
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "nfs"), (os.path.realpath(tmp_path), "xfs")])
    torchrun_on_several_nodes(monkeypatch)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(Reached):
        entry.main(entry_argv(cache))
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: warning: --data-cache-path {cache} is on xfs, on the disk of each node")
    monkeypatch.setenv("RANK", str(random.randint(1, 7)))
    with pytest.raises(Reached):
        entry.main(entry_argv(cache))
    assert capsys.readouterr().err == ""


def remote_prefix(scheme: str) -> str:
    """A fresh dataset prefix in object storage (``s3://BUCKET/...`` or ``msc://PROFILE/...``)."""
    return f"{scheme}://store{random.randrange(10**6)}/corpora/part{random.randrange(100)}/text"


def copied_by_megatron(monkeypatch: pytest.MonkeyPatch, prefix: str, folder: Path, rank: int) -> None:
    """megatron-core 0.19.2's own copying of ``s3://`` dataset ``prefix``'s ``.idx`` into the
    ``--object-storage-cache-path`` ``folder`` on global rank ``rank`` (torch.distributed up), from a store that
    answers with fresh random bytes: rank 0 downloads the index, any other rank asserts that the copy is there."""
    import torch
    from megatron.core.datasets import object_storage_utils

    class Store:
        def download_file(self, _bucket: str, _key: str, filename: str) -> None:
            Path(filename).write_bytes(random.randbytes(random.randrange(16, 64)))

    monkeypatch.setattr(object_storage_utils.boto3, "client", lambda _name: Store())
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: rank)
    config = object_storage_utils.ObjectStorageConfig(path_to_idx_cache=str(folder))
    object_storage_utils.cache_index_file(f"{prefix}.idx",
                                          object_storage_utils.get_index_cache_path(f"{prefix}.idx", config))


@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_an_object_storage_cache_path_in_node_memory_is_refused_where_the_run_reads_object_storage(scheme):
    """``--object-storage-cache-path`` in node memory in a multi-node job reading object-storage datasets: refused,
    naming the flag, the file system, what rank 0 puts there, how the other nodes' ranks stop and the fix; on a local
    disk, a warning. Without such datasets megatron-core leaves the folder unused: nothing is judged."""
    folder, nodes, remote = some_folder("/scratch/fast"), several_nodes(), [remote_prefix(scheme)]
    table = made_up_table(("/scratch/fast", "tmpfs"))
    with pytest.raises(ValueError) as refusal:
        index_cache.check_cache_shared_by_nodes(cache_args(None, folder), [], nodes, table, remote_prefixes=remote)
    message = str(refusal.value)
    assert message.startswith(f"--object-storage-cache-path {folder} is on tmpfs, in the memory of each node, in a "
                              f"job of {nodes} nodes: rank 0 copies the indices of the object-storage datasets there "
                              "on its own node")
    assert ("stop on a bare assertion (megatron-core asserts that the copy exists) when the datasets are built"
            in message)
    assert "give --object-storage-cache-path DIR, a folder this job can write on a file system every node" in message
    assert index_cache.check_cache_shared_by_nodes(cache_args(None, folder), [], nodes, table) == []
    [warning] = index_cache.check_cache_shared_by_nodes(
        cache_args(None, folder), [], nodes, made_up_table(("/scratch/fast", "xfs")), remote_prefixes=remote)
    assert warning.startswith(f"--object-storage-cache-path {folder} is on xfs, on the disk of each node, ")
    assert "unless the job put the same copies there on every node; if it did not, give --object-storage-cache-path" \
        in warning


def test_an_object_storage_cache_path_in_memory_is_refused_until_it_holds_every_copy(monkeypatch, tmp_path):
    """megatron-core's other ranks stop on a bare assertion where a dataset's index copy is missing: a folder in node
    memory lacking one is refused; once megatron-core's rank 0 copied every index there (the job may have done so on
    every node), it is a warning, beside the data cache folder's own."""
    remote, nodes = [remote_prefix("s3") for _ in range(random.randint(2, 4))], several_nodes()
    for prefix in remote[1:]:
        copied_by_megatron(monkeypatch, prefix, tmp_path, 0)
    with pytest.raises(AssertionError) as bare:
        copied_by_megatron(monkeypatch, remote[0], tmp_path, random.randint(1, 63))
    assert str(bare.value) == ""
    table = [("/", "nfs"), (os.path.realpath(tmp_path), "tmpfs"), ("/local/disk", "ext4")]
    with pytest.raises(ValueError, match=rf"^--object-storage-cache-path {tmp_path} is on tmpfs, "):
        index_cache.check_cache_shared_by_nodes(cache_args(None, tmp_path), [], nodes, table, remote_prefixes=remote)
    copied_by_megatron(monkeypatch, remote[0], tmp_path, 0)
    copied_by_megatron(monkeypatch, remote[0], tmp_path, random.randint(1, 63))
    data_cache = some_folder("/local/disk")
    warnings = index_cache.check_cache_shared_by_nodes(cache_args(data_cache, tmp_path), [], nodes, table,
                                                       remote_prefixes=remote)
    assert [line.split(" is on ")[0] for line in warnings] == [f"--data-cache-path {data_cache}",
                                                               f"--object-storage-cache-path {tmp_path}"]


def test_the_entry_refuses_a_multi_node_object_storage_cache_path_in_memory(monkeypatch, capsys, tmp_path):
    """The entry judges the ``--object-storage-cache-path`` of a run reading an ``s3://`` dataset."""
    entry = entry_up_to_pretrain(monkeypatch)
    copies = tmp_path / "copies"
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "nfs"), (os.path.realpath(tmp_path), "tmpfs")])
    torchrun_on_several_nodes(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128",
            "--data-path", remote_prefix("s3"), "--object-storage-cache-path", str(copies), "--no-mmap-bin-files"]
    assert entry.main(argv) == 2
    assert capsys.readouterr().err.startswith(f"{entry.PROG}: error: --object-storage-cache-path {copies} is on tmpfs")


def test_the_entry_reads_the_data_blend_once(monkeypatch, capsys, tmp_path):
    """The entry's multi-node check of ``--object-storage-cache-path`` takes the object-storage prefixes the data
    source check found: megatron's blend of the data paths is parsed once before ``pretrain``, not once more for
    them, and a folder every node shares passes."""
    from megatron.training import utils

    entry = entry_up_to_pretrain(monkeypatch)
    parse, parses = utils.get_blend_and_blend_per_split, []
    monkeypatch.setattr(utils, "get_blend_and_blend_per_split", lambda args: parses.append(args) or parse(args))
    monkeypatch.setattr(index_cache, "read_mounts", lambda: [("/", "nfs")])
    torchrun_on_several_nodes(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128",
            "--data-path", remote_prefix("s3"), "--object-storage-cache-path", str(tmp_path / "copies"),
            "--no-mmap-bin-files"]
    with pytest.raises(Reached):
        entry.main(argv)
    assert len(parses) == 1 and capsys.readouterr().err == ""
