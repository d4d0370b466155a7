"""megatron-core's GPTDataset index caches: where a run finds them, whether rank 0 can write them beside a
dataset, stale ones a rebuilt corpus would be read through, the cache flags megatron-core refuses, and a multi-node
job's folders that rank 0 fills for every rank (the index caches, the object-storage datasets' index copies) on one
node only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from megatron.oellm.paths import Mounts, can_write_into, file_system_type, read_mounts, unwritable_reason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from megatron.oellm.training.data_sources import Blend




CACHE_FLAGS = {"dataloader_fast_cache_load": "--dataloader-fast-cache-load",
               "dataloader_defer_npy_index_mmap": "--dataloader-defer-npy-index-mmap"}
"""Megatron's dataset-cache flags (argument -> flag): both read index caches an earlier run built in
``--data-cache-path``."""


def check_cache_flags(args: argparse.Namespace, blend: Blend | None) -> None:
    """Raise ``ValueError`` for the :data:`CACHE_FLAGS` megatron-core's dataset config refuses (when the datasets are
    built): either without ``--data-cache-path``, and ``--dataloader-fast-cache-load`` beside a blend ``blend``
    (``--data-path`` / ``--data-args-path``), which megatron-core takes only with per-split data paths; and for
    either flag with a ``--data-cache-path`` that holds no index cache (:func:`lacks_index_cache`): megatron-core
    then takes the caches as built and fails to open them (``FileNotFoundError``) when it builds the datasets or
    reads the first sample, after the model and optimizer are set up."""
    for name, flag in CACHE_FLAGS.items():
        if not getattr(args, name):
            continue
        if args.data_cache_path is None:
            raise ValueError(f"{flag} reads the dataset index caches an earlier run built in --data-cache-path: give "
                             "--data-cache-path DIR, or drop the flag")
        if lacks_index_cache(Path(args.data_cache_path)):
            raise ValueError(f"{flag} reads the dataset index caches an earlier run built in --data-cache-path, and "
                             f"{args.data_cache_path} holds none: megatron-core would fail to open them "
                             "(FileNotFoundError) after the model and optimizer are set up; run once without the flag "
                             "(same data, --data-cache-path and sample counts) to build them, then add it")
    if args.dataloader_fast_cache_load and blend is not None:
        raise ValueError("--dataloader-fast-cache-load: megatron-core takes it only with per-split data paths "
                         "(--train-data-path / --valid-data-path / --test-data-path or --per-split-data-args-path), "
                         "not with --data-path / --data-args-path; give the data per split, or drop the flag")


INDEX_CACHE_FILES = ("description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy")
"""The files of one GPTDataset index cache (``HASH-GPTDataset-SPLIT-`` + each); megatron-core 0.19.2 reuses a cache
only when all four exist, and otherwise builds the indices on rank 0 and writes them."""


def default_index_cache(prefix: str) -> Path:
    """The directory where megatron-core 0.19.2's GPTDataset keeps the index cache of dataset ``prefix`` when no
    ``--data-cache-path`` is given: ``PREFIX/cache/GPTDataset_indices`` (a directory named like the prefix, beside
    its ``.bin``/``.idx`` files)."""
    return Path(prefix) / "cache" / "GPTDataset_indices"


def lacks_index_cache(directory: Path) -> bool:
    """Whether ``directory`` certainly holds no complete index cache (:data:`INDEX_CACHE_FILES`) of a corpus or of
    ``--mock-data`` (:data:`CACHE_DATASET_CLASSES`), for any configuration: missing (a file in its path included), or listed without one. False when it cannot be listed
    (megatron may still find one)."""
    try:
        names = set(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    rest = INDEX_CACHE_FILES[1:]
    return not any(all(base + suffix in names for suffix in rest) for base in _cache_bases(names))


CACHE_DATASET_CLASSES = ("GPTDataset", "MockGPTDataset")
"""The dataset classes whose index caches megatron-core 0.19.2 names ``HASH-<class>-SPLIT-...``: a corpus's, and
``--mock-data``'s (written to ``--data-cache-path`` too)."""


def _cache_bases(names: Iterable[str]) -> list[str]:
    """The ``HASH-<class>-SPLIT-`` bases (:data:`CACHE_DATASET_CLASSES`) of the index caches whose description is
    among the file ``names`` of a cache directory, sorted."""
    first = INDEX_CACHE_FILES[0]
    return sorted(name.removesuffix(first) for name in names if name.endswith(first)
                  and any(f"-{dataset}-" in name for dataset in CACHE_DATASET_CLASSES))


SHARED_CACHE_FOLDER = ("a folder this job can write on a file system every node of the job shares (rank 0 writes "
                       "the index caches there and every other rank reads them from the same path)")
"""What ``--data-cache-path`` must be, for the refusals of :func:`check_index_cache` and
:func:`check_data_cache_path`: a node-local folder leaves the other nodes' ranks without the caches."""


def check_index_cache(args: argparse.Namespace, prefixes: list[str]) -> None:
    """Raise ``ValueError`` when, without ``--data-cache-path``, megatron-core would have to write the index cache
    of one of the local dataset ``prefixes`` into :func:`default_index_cache` and cannot: the directory is not
    writable (a shared, read-only dataset) and has no cache to reuse. Megatron finds out on rank 0 when it builds the
    datasets, after the model and optimizer are set up. A directory holding some cache is let through: whether it is
    this run's depends on the run's sample counts and tokenizer, known only then. A ``--data-cache-path`` is judged
    the same way (:func:`check_data_cache_path`)."""
    if args.data_cache_path is not None:
        check_data_cache_path(args.data_cache_path)
        return
    mounts = read_mounts()  # after check_data_source found each dataset's files, so automounts show their own type
    for prefix in prefixes:
        cache = default_index_cache(prefix)
        if not can_write_into(cache, mounts) and lacks_index_cache(cache):
            raise ValueError(f"dataset {prefix!r}: without --data-cache-path megatron-core writes its index cache to "
                             f"{cache}, which this process cannot write, and no cache is there to reuse; "
                             f"give --data-cache-path DIR, {SHARED_CACHE_FOLDER} (later runs reuse the caches)")


def check_data_cache_path(data_cache_path: str) -> None:
    """Raise ``ValueError`` when this process could not create or write ``--data-cache-path`` (a path under a file, a
    read-only mount, a folder of another user: :func:`megatron.oellm.paths.unwritable_reason`) and it holds no index
    cache to reuse: rank 0 of megatron-core creates the folder and writes every dataset's index cache into it when it
    builds the datasets, after the model and optimizer are set up, and the job stops there. Nothing is created."""
    cache = Path(data_cache_path)
    reason = unwritable_reason(cache)
    if reason is not None and lacks_index_cache(cache):
        raise ValueError(f"--data-cache-path {data_cache_path} cannot be written: {reason}, and no index cache is there "
                         "to reuse; megatron-core creates it and writes the index caches there when it builds the "
                         f"datasets, after the model and optimizer are set up, and stops; give {SHARED_CACHE_FOLDER}")


def stale_index_caches(prefix: str, cache_dir: Path) -> list[Path]:
    """The GPTDataset index caches in ``cache_dir`` (their ``description.txt``) that megatron-core 0.19.2 built for
    dataset ``prefix`` before the dataset's ``.idx`` was last written. megatron-core reuses a cache whose description
    matches the run without looking at the dataset, so after a rebuild at the same prefix it reads the new tokens
    through the old indices: an ``IndexError`` when the dataset shrank, samples cut at the old documents' bounds
    otherwise. A dataset copied or touched after its cache was built looks the same, so this only finds candidates."""
    try:
        index_written = os.stat(f"{prefix}.idx").st_mtime
        names = os.listdir(cache_dir)
    except OSError:
        return []
    stale = []
    for base in _cache_bases(names):
        description_file = cache_dir / f"{base}{INDEX_CACHE_FILES[0]}"
        try:
            description = json.loads(description_file.read_text(encoding="utf-8"))
            built = (cache_dir / f"{base}{INDEX_CACHE_FILES[1]}").stat().st_mtime
        except (OSError, ValueError):  # not a cache megatron-core would reuse either
            continue
        if isinstance(description, dict) and description.get("dataset_path") == prefix and built < index_written:
            stale.append(description_file)
    return stale


def stale_cache_warnings(args: argparse.Namespace, local_prefixes: list[str]) -> list[str]:
    """One warning per dataset of ``local_prefixes`` (what :func:`check_data_source` returns) with index caches older
    than its ``.idx`` (:func:`stale_index_caches`), in ``--data-cache-path`` or the dataset's default cache
    directory, naming them and the fix. A warning, not a refusal: only the user knows whether the dataset was
    rebuilt or just copied."""
    lines = []
    for prefix in dict.fromkeys(local_prefixes):
        cache_dir = Path(args.data_cache_path) if args.data_cache_path is not None else default_index_cache(prefix)
        stale = stale_index_caches(prefix, cache_dir)
        if stale:
            bases = ", ".join(str(path).removesuffix(INDEX_CACHE_FILES[0]) + "*" for path in stale)
            lines.append(f"dataset {prefix!r} was written after {len(stale)} of its index caches were built "
                         f"({bases}); megatron-core reuses them without checking the dataset, so if it was rebuilt "
                         "the run reads the new tokens through the old indices: delete those files to have them "
                         "rebuilt (if the dataset was only copied, they are still right)")
    return lines


MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs"})
"""File systems in a node's own memory: a folder on one is never the same folder on another node."""

NODE_MEMORY_FOLDER = Path("/dev/shm")
"""The node's shared-memory folder (tmpfs on Linux), node-local whatever type the mount table gives it."""

LOCAL_DISK_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "overlay"})
"""File systems on a node's own disk (or a container's writable layer, ``overlay``): node-local as a rule, though a
site may have put the same caches on every node's disk. Shared file systems (nfs, lustre, gpfs, beegfs, cephfs,
``fuse.*``) and types not listed here are taken as shared."""

SHARED_EXAMPLES = "NFS, Lustre, GPFS, BeeGFS or CephFS"
"""Where a multi-node job's index caches belong, for the messages of :func:`check_cache_shared_by_nodes`."""


def _positive_count(environ: Mapping[str, str], name: str) -> int | None:
    """The whole number above 0 that ``environ`` holds under ``name``; None where it is unset or anything else."""
    value = environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def most_worker_groups(world_size: int | None, local_world_size: int | None) -> int | None:
    """The most torchrun agents (worker groups) ``world_size`` ranks can fill, this agent holding
    ``local_world_size`` of them (1 where unknown, all of them where it claims more) and every other agent at least
    one: torchrun's rank assignment sums the agents' own ``--nproc-per-node``, which may differ between nodes, so
    ``world_size`` over ``local_world_size`` is no cap. None where ``world_size`` is unknown."""
    if world_size is None:
        return None
    return world_size - min(local_world_size or 1, world_size) + 1


def job_node_count(environ: Mapping[str, str]) -> int:
    """The number of nodes the job's ranks run on, from the launcher's environment ``environ``: torchrun's
    ``GROUP_WORLD_SIZE`` (its agents, one per node), capped by the agents ``WORLD_SIZE`` ranks can fill
    (:func:`most_worker_groups`) where an inconsistent environment claims more; else ``WORLD_SIZE`` over
    ``LOCAL_WORLD_SIZE`` (ranks per node), rounded up, where both are set; else Slurm's ``SLURM_NNODES`` capped by
    ``WORLD_SIZE`` (1 where it is unset), as the ranks span no more nodes than there are ranks: a single process in
    an ``salloc -N2`` shell, which inherits ``SLURM_NNODES=2``, is one node. 1 where none gives a whole number (a
    login node), so that the checks of a multi-node job stay silent."""
    world_size, local_world_size = _positive_count(environ, "WORLD_SIZE"), _positive_count(environ, "LOCAL_WORLD_SIZE")
    groups = _positive_count(environ, "GROUP_WORLD_SIZE")
    if groups is not None:
        most = most_worker_groups(world_size, local_world_size)
        return groups if most is None else min(groups, most)
    if world_size is not None and local_world_size is not None:
        return math.ceil(world_size / local_world_size)
    slurm_nodes = _positive_count(environ, "SLURM_NNODES")
    return 1 if slurm_nodes is None else min(slurm_nodes, world_size or 1)


class FolderRole(NamedTuple):
    """What rank 0 of megatron-core 0.19.2 puts in a folder that the ranks of every node then read from the same
    path, in the words of :func:`check_cache_shared_by_nodes`'s messages."""

    writes: str
    """What rank 0 does there ("writes the index caches")."""
    kept: str
    """What a job may have put there on every node itself ("caches")."""
    failure: str
    """How the other nodes' ranks stop without it ("with FileNotFoundError")."""
    fix: str
    """The flag and folder that fix a node-local one."""


INDEX_CACHES = FolderRole("writes the index caches", "caches", "with FileNotFoundError",
                          f"give --data-cache-path DIR, {SHARED_CACHE_FOLDER}")
"""The role of an index cache folder (``--data-cache-path``, else each local dataset's :func:`default_index_cache`):
rank 0 builds the caches and, after a barrier, every other rank opens them."""

INDEX_COPIES = FolderRole(
    "copies the indices of the object-storage datasets", "copies",
    "on a bare assertion (megatron-core asserts that the copy exists)",
    "give --object-storage-cache-path DIR, a folder this job can write on a file system every node of the job "
    "shares (rank 0 copies each object-storage dataset's .idx there and every other rank reads it from the same "
    "path)")
"""The role of ``--object-storage-cache-path``: rank 0 downloads each ``s3://`` / ``msc://`` dataset's ``.idx`` into
it and, after a barrier, every other rank building the datasets asserts that its copy is there and reads it."""


class SharedFolder(NamedTuple):
    """A folder megatron-core fills on rank 0 for every rank to read (:func:`cache_folders`)."""

    path: Path
    named: str
    """How a message names it."""
    role: FolderRole
    lacks_contents: Callable[[], bool]
    """Whether it certainly lacks what the ranks read there (so that no job can have put it on every node): asked
    only of a folder in node memory, as it lists the folder."""


def cache_folders(args: argparse.Namespace, local_prefixes: list[str],
                  remote_prefixes: Sequence[str] = ()) -> list[SharedFolder]:
    """The folders megatron-core 0.19.2 fills on rank 0 for the other ranks: the index cache folder (the
    ``--data-cache-path``, else each local dataset's :func:`default_index_cache`; none for ``--mock-data`` without
    one, whose caches megatron-core keeps only in a ``--data-cache-path``), and the ``--object-storage-cache-path``
    where the run reads datasets in object storage (``remote_prefixes``: megatron-core leaves the folder unused
    without them)."""
    if args.data_cache_path is not None:
        cache = Path(args.data_cache_path)
        folders = [SharedFolder(cache, f"--data-cache-path {args.data_cache_path}", INDEX_CACHES,
                                partial(lacks_index_cache, cache))]
    else:
        folders = [SharedFolder(cache, f"the index cache folder of dataset {prefix!r} (no --data-cache-path), {cache},",
                                INDEX_CACHES, partial(lacks_index_cache, cache))
                   for prefix in dict.fromkeys(local_prefixes) for cache in [default_index_cache(prefix)]]
    if remote_prefixes and args.object_storage_cache_path is not None:
        copies = Path(args.object_storage_cache_path)
        folders.append(SharedFolder(copies, f"--object-storage-cache-path {args.object_storage_cache_path}",
                                    INDEX_COPIES, partial(lacks_index_copies, copies, remote_prefixes)))
    return folders


def lacks_index_copies(folder: Path, remote_prefixes: Sequence[str]) -> bool:
    """Whether ``folder`` (an ``--object-storage-cache-path``) lacks the copy of the ``.idx`` of one of the
    object-storage datasets ``remote_prefixes``, at the path megatron-core 0.19.2 gives it there."""
    from megatron.core.datasets.indexed_dataset import get_idx_path
    from megatron.core.datasets.object_storage_utils import ObjectStorageConfig, get_index_cache_path

    config = ObjectStorageConfig(path_to_idx_cache=str(folder))
    return not all(os.path.isfile(get_index_cache_path(get_idx_path(prefix), config)) for prefix in remote_prefixes)


def node_local_type(folder: Path, mounts: Mounts) -> tuple[str, bool] | None:
    """Where ``folder`` is node-local: the type of its file system (links resolved, innermost of ``mounts``), or
    :data:`NODE_MEMORY_FOLDER` for a folder under it on a type the table does not give as in memory, and whether it
    is in the node's memory (:data:`MEMORY_FILE_SYSTEMS`) or on its disk (:data:`LOCAL_DISK_FILE_SYSTEMS`); None for
    a shared or unknown type."""
    kind = file_system_type(folder, mounts)
    if kind in MEMORY_FILE_SYSTEMS:
        return kind, True
    resolved = Path(os.path.realpath(folder))
    if resolved == NODE_MEMORY_FOLDER or NODE_MEMORY_FOLDER in resolved.parents:
        return f"{NODE_MEMORY_FOLDER} (shared memory)", True
    if kind in LOCAL_DISK_FILE_SYSTEMS:
        return kind, False
    return None


def check_cache_shared_by_nodes(args: argparse.Namespace, local_prefixes: list[str], node_count: int,
                                mounts: Mounts | None = None, remote_prefixes: Sequence[str] = ()) -> list[str]:
    """In a job of more than one node (``node_count``, :func:`job_node_count`), raise ``ValueError`` for a folder
    megatron-core fills on rank 0 for the other ranks (:func:`cache_folders`: the index cache folder, and the
    ``--object-storage-cache-path`` of the object-storage datasets ``remote_prefixes``) in the node's memory
    (:func:`node_local_type`: tmpfs, ``/dev/shm``) that lacks what they read there, and return one warning per such
    folder on a local disk, or in memory already holding it. Rank 0 of megatron-core 0.19.2 writes the index caches,
    or the copies of the object-storage datasets' indices, on its own node, and after a barrier every other rank
    that builds the datasets reads them from the same path: on the other nodes they are not there, and those ranks
    stop (:class:`FolderRole`'s ``failure``) when the datasets are built, after the model and optimizer are set up. A
    local disk, or a folder in memory already holding them, may have been filled on every node by the job itself, so
    those are warnings. ``mounts`` is the mount table (:func:`megatron.oellm.paths.read_mounts` where not given;
    tests pass their own)."""
    if node_count < 2:
        return []
    folders = cache_folders(args, local_prefixes, remote_prefixes)
    if not folders:
        return []
    mounts = read_mounts() if mounts is None else mounts
    warnings = []
    for folder in folders:
        found = node_local_type(folder.path, mounts)
        if found is None:
            continue
        kind, in_memory = found
        role = folder.role
        where = (f"{folder.named} is on {kind}, {'in the memory' if in_memory else 'on the disk'} of each node, in a "
                 f"job of {node_count} nodes: rank 0 {role.writes} there on its own node, and the ranks of the other "
                 f"nodes, which read them from the same path on theirs, stop {role.failure} when the datasets are "
                 "built, after the model and optimizer are set up")
        fix = f"{role.fix}: {SHARED_EXAMPLES}"
        if in_memory and folder.lacks_contents():
            raise ValueError(f"{where}; {fix}")
        warnings.append(f"{where}, unless the job put the same {role.kept} there on every node; if it did not, {fix}")
    return warnings
