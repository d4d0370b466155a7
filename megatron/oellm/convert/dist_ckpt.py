"""Write and read megatron-core ``torch_dist`` checkpoints one conversion unit at a time (CPU, no process group).

The files are what ``megatron.core.dist_checkpointing.save`` writes for a model at TP=PP=EP=1: a PyTorch
Distributed Checkpoint (``.metadata`` + ``__0_<n>.distcp``, one file per unit) whose tensors sit under the sharded keys of
:mod:`megatron.oellm.convert.mcore_layout`, the non-tensor "common" state as the byte object
``common_state/shard_0_1``, and megatron's ``metadata.json``. We drive ``torch.distributed.checkpoint`` with our own
planners instead of calling ``dist_checkpointing.save`` because that call needs every tensor in memory at once;
here a tensor is produced when the writer reaches it (items are written in unit order, one unit cached), and
reading loads only the chunks of one unit. Before anything is read, ``.metadata`` and every data file it names must be
readable by this user, and each data file must reach the end of its last item, so that a damaged copy or a file of
another user's umask is named up front, not met half-way through a conversion.
"""

from __future__ import annotations

import io
import math
import os
import queue
import re
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import Tensor
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    ReadItem,
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from megatron.oellm.convert.errors import ConversionError, no_read_permission
from megatron.oellm.convert.mcore_layout import Piece
from megatron.oellm.convert.output import name_unnamed_errors, writing_output

COMMON_STATE_KEY = "common_state/shard_0_1"
"""DCP key of megatron's common state (``ShardedObject('common_state', shape (1,), offset (0,))``)."""
COMMON_STATE_PREFIX = "common_state/"
"""Key prefix of the common state in a DCP ``.metadata``: megatron-core 0.19.2 adds it only in
``dist_checkpointing.save`` (the ``torch_dist`` writer); its ``torch_dcp`` / ``fsdp_dtensor`` saves store the plain
state dict (``args``, ``model``, ...)."""
METADATA_FILE = ".metadata"
"""PyTorch DCP's metadata file: every item's key, shape and place (file, offset, length)."""
DATA_FILE_SUFFIX = ".distcp"
"""Suffix of PyTorch DCP's data files (``__<rank>_<n>.distcp``)."""
DATA_FILE = re.compile(rf"__\d+_\d+{re.escape(DATA_FILE_SUFFIX)}")
"""The name of a data file of PyTorch DCP's file-system writer (``__<rank>_<n>.distcp``)."""
LEGACY_COMMON_FILE = "common.pt"
"""Where older megatron-core releases kept the common state."""
CHECKPOINT_CONFIG_FILE = "metadata.json"
"""megatron-core's description of a ``torch_dist`` checkpoint beside DCP's ``.metadata``: ``_get_checkpoint_format``
(``check_is_distributed_checkpoint``) tells that format from ``torch_dcp`` / ``fsdp_dtensor`` by it."""
TORCH_RANK_PREFIX = "mp_rank_"
"""The per-rank directories of a ``--ckpt-format torch`` checkpoint (``mp_rank_00``, ``mp_rank_00_000``, ...)."""
_TORCH_DIST_ONLY = ("oellm convert reads torch_dist checkpoints (megatron-core's default --ckpt-format): re-save it "
                    "once with megatron (load it with the --ckpt-format and layout that saved it, plus "
                    "--ckpt-convert-format torch_dist --ckpt-convert-save DIR: megatron saves DIR/torch_dist and "
                    "exits), then pass --mcore DIR/torch_dist")
CONTENT_METADATA = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
"""The sharded-state-dict metadata megatron training builds and stores (``content_metadata``); the keys of
:mod:`mcore_layout` are the ones produced under it."""


@contextmanager
def quiet_megatron_core_import() -> Iterator[None]:
    """Silence the warnings megatron-core's import prints on a CPU node (every absent fused kernel, TE and apex, and
    absl): irrelevant to a conversion, five to ten lines. Its import happens where a conversion imports it and where
    unpickling a checkpoint's common state meets a megatron-core object (a training run's stored arguments)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@contextmanager
def _single_process() -> Iterator[None]:
    """Silence DCP's notice that it runs without a process group (intended: ``no_dist=True``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


class _StreamingSavePlanner(DefaultSavePlanner):
    """Plans one write item per :class:`Piece` plus the common state; tensors are produced on demand."""

    def __init__(self, chunks: list[tuple[Piece, torch.dtype]], fetch: Callable[[Piece], Tensor],
                 common: dict) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self._chunks = chunks
        self._fetch = fetch
        self._by_index = {MetadataIndex(p.key, p.offset): p for p, _ in chunks}
        self.fetch_failed = False
        """Whether producing a tensor raised: a failure of the input or the code, not of the output's writes."""
        buffer = io.BytesIO()
        torch.save([common], buffer)
        self._common = buffer.getvalue()

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator: bool = False) -> None:
        """No state dict: the plan comes from the pieces."""
        self.state_dict = {}
        self.is_coordinator = is_coordinator

    def create_local_plan(self) -> SavePlan:
        """Common state first, then every piece in unit order."""
        items = [WriteItem(index=MetadataIndex(COMMON_STATE_KEY), type=WriteItemType.BYTE_IO)]
        for piece, dtype in self._chunks:
            items.append(WriteItem(
                index=MetadataIndex(piece.key, piece.offset), type=WriteItemType.SHARD,
                tensor_data=TensorWriteData(
                    chunk=ChunkStorageMetadata(offsets=torch.Size(piece.offset), sizes=torch.Size(piece.chunk_shape)),
                    properties=TensorProperties(dtype=dtype), size=torch.Size(piece.global_shape))))
        self.plan = SavePlan(items)
        return self.plan

    def unit_of_item(self, unit_of: Mapping[str, object]) -> Callable[[WriteItem], object]:
        """Write item -> unit of its piece (None for the common state)."""
        def lookup(item: WriteItem) -> object:
            piece = self._by_index.get(MetadataIndex(item.index.fqn, item.index.offset))
            return None if piece is None else unit_of[piece.name]
        return lookup

    def resolve_data(self, write_item: WriteItem) -> Tensor | io.BytesIO:
        """The common-state bytes, or the tensor chunk of the piece at ``write_item.index``."""
        if write_item.type == WriteItemType.BYTE_IO:
            return io.BytesIO(self._common)
        piece = self._by_index[MetadataIndex(write_item.index.fqn, write_item.index.offset)]
        try:
            return self._fetch(piece)
        except BaseException:
            self.fetch_failed = True
            raise


class _OneFilePerUnitWriter(dcp.FileSystemWriter):
    """``FileSystemWriter`` writing each unit's items to a file of its own, in plan order.

    torch's writer keeps every tensor of a file referenced until the file is closed, and with one file per rank
    that would be the whole model; one file per unit bounds it to a unit. Relies on ``FileSystemWriter._write_data``
    (torch 2.13, the version this package pins).
    """

    def __init__(self, path: Path, unit_of_item: Callable[[WriteItem], object]) -> None:
        super().__init__(path, single_file_per_rank=True, thread_count=1)
        self._unit_of_item = unit_of_item

    def write_data(self, plan: SavePlan, planner) -> object:
        """Queue one file per run of consecutive items of the same unit (the common state gets the first file)."""
        buckets: list[list[WriteItem]] = []
        last = object()
        for item in plan.items:
            unit = self._unit_of_item(item)
            if not buckets or (unit is not None and unit != last):
                buckets.append([])
                last = unit if unit is not None else last
            buckets[-1].append(item)
        files: queue.Queue = queue.Queue()
        for i, bucket in enumerate(buckets):
            name = f"{plan.storage_data.prefix}{i}{DATA_FILE_SUFFIX}"
            files.put((self.fs.concat_path(self.path, name), name, bucket))
        return self._write_data(planner, files)


def save_streaming(directory: Path, chunks: list[tuple[Piece, torch.dtype]], unit_of: Mapping[str, object],
                   produce: Callable[[object], dict[str, Tensor]], common: dict) -> None:
    """Write a megatron-core distributed checkpoint to ``directory``.

    ``chunks`` (in unit order) say what goes where; ``produce(unit)`` returns the state-dict tensors of one unit and
    is called once per unit (``unit_of[name]``), so at most one unit's tensors are held. ``common`` becomes the
    checkpoint's common state (``content_metadata`` is added).
    """
    with quiet_megatron_core_import():
        from megatron.core.dist_checkpointing.core import CheckpointingConfig, save_config

    cache: dict[str, object] = {"unit": None, "tensors": {}}

    def fetch(piece: Piece) -> Tensor:
        unit = unit_of[piece.name]
        if cache["unit"] != unit:
            cache["tensors"] = {}  # drop the previous unit before producing the next
            cache["tensors"], cache["unit"] = produce(unit), unit
        tensor = cache["tensors"][piece.name][piece.rows[0]:piece.rows[1]]
        return tensor.reshape(piece.chunk_shape).contiguous()

    directory.mkdir(parents=True, exist_ok=True)
    planner = _StreamingSavePlanner(chunks, fetch, {**common, "content_metadata": dict(CONTENT_METADATA)})
    _save(directory, planner, _OneFilePerUnitWriter(directory, planner.unit_of_item(unit_of)))
    with writing_output(directory / CHECKPOINT_CONFIG_FILE):
        save_config(CheckpointingConfig("torch_dist", 1), str(directory))


def _save(directory: Path, planner: _StreamingSavePlanner, writer: _OneFilePerUnitWriter) -> None:
    """DCP's save of ``planner``'s items into ``directory`` by ``writer``. An operating-system error naming no file
    that did not arise producing a tensor (where the input is read) arose writing a file of ``directory``, and is
    given that name (:func:`name_unnamed_errors`): torch's writer passes on a failed ``write()`` or ``fsync()`` as
    it is."""
    try:
        with _single_process():
            dcp.save({}, storage_writer=writer, planner=planner, no_dist=True)
    except BaseException as error:
        if not planner.fetch_failed:
            name_unnamed_errors(error, directory)
        raise


def region_read_items(metadata: Metadata, key: str, offset: tuple[int, ...], sizes: tuple[int, ...],
                      name: str) -> list[ReadItem]:
    """DCP read items filling the region (``offset``, ``sizes``) of checkpoint tensor ``key`` (for state-dict tensor
    ``name``) from the chunks the checkpoint stores. A region its chunks do not cover is a :class:`ConversionError`:
    its elements would keep whatever the read buffer held (the checkpoint's ``.metadata`` lists no data for them)."""
    chunk = ChunkStorageMetadata(offsets=torch.Size(offset), sizes=torch.Size(sizes))
    items = create_read_items_for_chunk_list(key, metadata.state_dict_metadata[key], [chunk])
    covered = sum(math.prod(item.lengths) for item in items)
    if covered < math.prod(sizes):
        raise ConversionError(f"the checkpoint stores no data for {math.prod(sizes) - covered} of the "
                              f"{math.prod(sizes)} elements of {name} (tensor {key!r}, offset {list(offset)}); "
                              "its .metadata lists chunks that do not cover the tensor: the checkpoint is damaged or "
                              "incomplete")
    return items


def pieces_read_items(metadata: Metadata, key: str, key_pieces: Sequence[Piece]
                      ) -> tuple[tuple[int, ...], tuple[int, ...], list[ReadItem]]:
    """The region (offset, sizes) spanning ``key_pieces`` (pieces of checkpoint tensor ``key``) and the DCP read items
    filling it (:func:`region_read_items`). One region per tensor: planning a read scans every chunk the checkpoint
    stores for it (one per layer and expert of a stacked expert tensor), so one plan per piece made a conversion's
    planning pass take minutes. Missing data is named by the piece it belongs to."""
    low = tuple(min(p.offset[d] for p in key_pieces) for d in range(len(key_pieces[0].offset)))
    high = [max(p.offset[d] + p.chunk_shape[d] for p in key_pieces) for d in range(len(low))]
    sizes = tuple(h - lo for lo, h in zip(low, high, strict=True))
    try:
        return low, sizes, region_read_items(metadata, key, low, sizes, key_pieces[0].name)
    except ConversionError:
        for p in key_pieces:  # a damaged checkpoint only: find the piece whose data is missing
            region_read_items(metadata, key, p.offset, p.chunk_shape, p.name)
        raise


class _RegionLoadPlanner(DefaultLoadPlanner):
    """Loads one region (offset + buffer) per checkpoint key into the given buffers."""

    def __init__(self, regions: dict[str, tuple[tuple[int, ...], Tensor]], items: list[ReadItem]) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self._regions = regions
        self._items = items

    def create_local_plan(self) -> LoadPlan:
        """The read items covering each region (:func:`region_read_items`, planned before the load)."""
        return LoadPlan(self._items)

    def resolve_tensor(self, read_item) -> Tensor:
        """The part of the region buffer a read item fills."""
        _, buffer = self._regions[read_item.dest_index.fqn]
        return buffer[tuple(slice(o, o + n) for o, n in zip(read_item.dest_offsets, read_item.lengths, strict=True))]


class GivenMetadataReader(dcp.FileSystemReader):
    """DCP's file-system reader of a checkpoint whose ``.metadata`` the caller has read already (``metadata``,
    :func:`read_metadata`). DCP's ``load`` asks its reader for the metadata before it plans the read; this one hands
    over ``metadata`` instead of unpickling the file again, and reads the data files as its base class does."""

    def __init__(self, directory: Path, metadata: Metadata) -> None:
        super().__init__(directory)
        self._metadata = metadata

    def read_metadata(self, *args: object, **kwargs: object) -> Metadata:
        """The metadata given, for any request: DCP asks for a rank's own metadata (``rank=``) only when the first
        answer is empty, which ``metadata`` never is."""
        return self._metadata


class CheckpointReader:
    """Reads state-dict tensors of a megatron-core distributed checkpoint by their :class:`Piece` s. ``metadata`` is
    the directory's DCP metadata where the caller has read it already (the training entry's checkpoint reader, which
    checks the stored keys too); read here otherwise, and either way the only read of ``.metadata``: DCP's loads of the
    common state and of the tensors take it from here (:class:`GivenMetadataReader`)."""

    def __init__(self, directory: Path, metadata: Metadata | None = None) -> None:
        if not (directory / METADATA_FILE).is_file():
            if _holds_rank_files(directory):
                raise ConversionError(f"{directory} is a --ckpt-format torch checkpoint (one {TORCH_RANK_PREFIX}* "
                                      f"directory per model-parallel rank); {_TORCH_DIST_ONLY}")
            if (directory / CHECKPOINT_CONFIG_FILE).is_file():
                raise ConversionError(lost_dcp_metadata(directory))
            if is_unfinished_save_without_metadata(directory):
                raise ConversionError(f"{unfinished_save_problem(directory)}; {_unfinished_save_fix(directory)}")
            raise ConversionError(f"{directory} is not a megatron-core distributed checkpoint (no .metadata); "
                                  "pass the directory holding metadata.json and .metadata (e.g. <ckpt>/release)")
        self.metadata = read_metadata(directory) if metadata is None else metadata
        if not (directory / CHECKPOINT_CONFIG_FILE).is_file():
            if is_unfinished_torch_dist(self.metadata):
                raise ConversionError(f"{unfinished_save_problem(directory)}; {_unfinished_save_fix(directory)}")
            raise ConversionError(f"{directory} holds PyTorch DCP files but no {CHECKPOINT_CONFIG_FILE}, which "
                                  "megatron-core reads as --ckpt-format torch_dcp (fsdp_dtensor under Megatron-FSDP), "
                                  f"not torch_dist; {_TORCH_DIST_ONLY}")
        self.directory = directory
        self._data_files = check_data_files(directory, self.metadata)
        self._tensor_shapes = {key: (tuple(md.size), md.properties.dtype)
                               for key, md in self.metadata.state_dict_metadata.items()
                               if isinstance(md, TensorStorageMetadata)}

    def input_files(self) -> list[Path]:
        """Every file of the checkpoint a conversion reads: ``.metadata``, the data files it names, a legacy
        ``common.pt``."""
        legacy = self.directory / LEGACY_COMMON_FILE
        return [self.directory / METADATA_FILE, *self._data_files, *([legacy] if legacy.is_file() else [])]

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Checkpoint key -> (global shape, dtype) of every stored tensor (from the metadata read at construction)."""
        return self._tensor_shapes

    def common_state(self) -> dict:
        """The checkpoint's common (non-tensor) state: the ``common_state`` object, or a legacy ``common.pt``;
        empty if there is neither."""
        legacy = self.directory / LEGACY_COMMON_FILE
        if legacy.is_file():
            try:
                with quiet_megatron_core_import():
                    return torch.load(legacy, map_location="cpu", weights_only=False)
            except Exception as error:  # unpickling a damaged file raises about any type
                raise ConversionError(f"cannot read {legacy}: {error!r}; is the checkpoint complete?") from error
        if not isinstance(self.metadata.state_dict_metadata.get(COMMON_STATE_KEY), BytesStorageMetadata):
            return {}
        state = {COMMON_STATE_KEY: io.BytesIO()}
        try:
            with _single_process(), quiet_megatron_core_import():
                dcp.load(state, storage_reader=GivenMetadataReader(self.directory, self.metadata), no_dist=True)
                loaded = state[COMMON_STATE_KEY]
                if isinstance(loaded, io.BytesIO):
                    loaded.seek(0)
                    loaded = torch.load(loaded, weights_only=False)
            return loaded[0]
        except (CheckpointException, Exception) as error:  # damaged bytes of the right length: unpickling raises
            # about any type, inside DCP's reader (a CheckpointException, a BaseException) or in the torch.load here
            _refuse_denied_read(error, self.directory)
            cause = _first_failure(error) if isinstance(error, CheckpointException) else type(error).__name__
            raise ConversionError(f"cannot read the common state of {self.directory} ({cause}); the checkpoint is "
                                  "damaged (copy it again)") from error

    def read(self, pieces: Iterable[Piece]) -> dict[str, Tensor]:
        """State-dict tensors assembled from ``pieces`` (all pieces of each wanted name), in one checkpoint read."""
        shapes = self.tensor_shapes()
        by_key = _pieces_by_key(pieces)
        regions: dict[str, tuple[tuple[int, ...], Tensor]] = {}
        items: list[ReadItem] = []
        for key, key_pieces in by_key.items():
            if key not in shapes:
                raise ConversionError(f"{self.directory}: missing tensor {key!r} (for {key_pieces[0].name})")
            low, sizes, key_items = pieces_read_items(self.metadata, key, key_pieces)
            items += key_items
            regions[key] = (low, torch.empty(sizes, dtype=shapes[key][1]))
        try:
            with _single_process():
                dcp.load({}, storage_reader=GivenMetadataReader(self.directory, self.metadata),
                         planner=_RegionLoadPlanner(regions, items), no_dist=True)
        except CheckpointException as error:
            _refuse_denied_read(error, self.directory)
            files = sorted({str(self.directory / info.relative_path)
                            for index, info in self.metadata.storage_data.items() if index.fqn in regions})
            raise ConversionError(f"cannot read the checkpoint data in {', '.join(files)} ({_first_failure(error)}); "
                                  "the checkpoint is damaged (copy it again)") from error
        chunks = []
        for key, key_pieces in by_key.items():
            low, buffer = regions[key]
            for p in key_pieces:
                index = tuple(slice(o - lo, o - lo + s) for o, lo, s in zip(p.offset, low, p.chunk_shape, strict=True))
                chunks.append((p, buffer[index].reshape(p.chunk_shape[p.lead_axes:])))
        return _by_name(chunks)

    def read_meta(self, pieces: Iterable[Piece]) -> dict[str, Tensor]:
        """What :meth:`read` returns for ``pieces``, as ``meta`` tensors (shapes and dtypes, no data read): the
        planning pass of a conversion."""
        shapes = self.tensor_shapes()
        pieces = list(pieces)
        for key, key_pieces in _pieces_by_key(pieces).items():  # refuse missing data before anything is written
            pieces_read_items(self.metadata, key, key_pieces)
        return _by_name((p, torch.empty(p.chunk_shape[p.lead_axes:], dtype=shapes[p.key][1], device="meta"))
                        for p in pieces)


def is_unfinished_torch_dist(metadata: Metadata) -> bool:
    """Whether DCP ``metadata`` lists megatron's common state (:data:`COMMON_STATE_PREFIX`), which only a
    ``torch_dist`` save writes: in a directory without ``metadata.json`` (written last, when the save finishes), a
    ``torch_dist`` save that did not finish, not a ``torch_dcp`` / ``fsdp_dtensor`` checkpoint."""
    return any(key.startswith(COMMON_STATE_PREFIX) for key in metadata.state_dict_metadata)


def is_unfinished_save_without_metadata(directory: Path) -> bool:
    """Whether ``directory``, holding no ``.metadata``, is a save that did not finish: megatron-core writes
    ``.metadata`` in the save's finalize step (DCP's ``storage_writer.finish``) just before ``metadata.json``, so a
    job stopped while writing leaves ``__<rank>_<n>.distcp`` data files without it; a non-empty ``iter_*`` directory
    of a run folder with a tracker is one too (e.g. only ``common.pt`` written). An empty one is not: megatron finds
    no checkpoint there, which its own refusal says. False where it cannot be listed."""
    from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE, iteration_of

    try:
        names = [child.name for child in directory.iterdir()]
    except OSError:
        return False
    if any(DATA_FILE.fullmatch(name) for name in names):
        return True
    return bool(names) and iteration_of(directory.name) is not None and (directory.parent / ITERATION_FILE).is_file()


def lost_dcp_metadata(directory: Path) -> str:
    """Why ``directory`` holds megatron-core's ``metadata.json``, written when a save finishes, but not DCP's hidden
    ``.metadata``, written just before it: a finished save copied without its dot files (``cp -r DIR/* DST``, a glob
    skips them), not an unfinished one; and the fix."""
    return (f"{directory} holds {CHECKPOINT_CONFIG_FILE}, which megatron-core writes when a save finishes, but not "
            f"DCP's hidden {METADATA_FILE}, written just before it: a copy that skips dot files (a shell glob such as "
            f"`cp -r DIR/* DST`) leaves it behind; copy the directory itself (`cp -r DIR DST`, `rsync -a DIR/ DST/`)")


def unfinished_save_problem(directory: Path) -> str:
    """What an unfinished ``torch_dist`` save in ``directory`` (:func:`is_unfinished_torch_dist`, or
    :func:`is_unfinished_save_without_metadata` where it holds no ``.metadata``) is, for a refusal that goes on with
    its fix."""
    if not (directory / METADATA_FILE).is_file():
        return (f"{directory} is an unfinished save: it holds no {METADATA_FILE} and no {CHECKPOINT_CONFIG_FILE}, "
                "which megatron-core writes last, when the save finishes, after the __*_*.distcp data files (the job "
                "was stopped while saving, e.g. by its time limit, or a copy of it is still in progress)")
    return (f"{directory} is an unfinished torch_dist save: its {METADATA_FILE} lists megatron's common_state, which "
            f"only a torch_dist save writes, but the {CHECKPOINT_CONFIG_FILE} megatron-core writes last, when the save "
            "finishes, is missing (the job was stopped while saving, e.g. by its time limit, or a copy of it is still "
            "in progress)")


def _unfinished_save_fix(directory: Path) -> str:
    """What to convert instead of the unfinished save in ``directory``: the finished one its run's
    ``latest_checkpointed_iteration.txt`` names, where it names another; else wait for a copy or take another."""
    from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE, finished_tracked_iteration

    tracked = finished_tracked_iteration(directory)
    if tracked is None:
        return ("wait for the copy to finish (or copy it again), or pass --mcore the iteration directory of a finished "
                f"save (one holding {CHECKPOINT_CONFIG_FILE})")
    return (f"{directory.parent / ITERATION_FILE} names {tracked.name}, the run's last finished save: pass --mcore "
            f"{directory.parent} to export it")


def _holds_rank_files(directory: Path) -> bool:
    """Whether ``directory`` holds the per-rank directories of a ``--ckpt-format torch`` checkpoint (False where it
    cannot be listed: the caller's message about the missing ``.metadata`` then stands)."""
    try:
        return any(child.name.startswith(TORCH_RANK_PREFIX) for child in directory.iterdir())
    except OSError:
        return False


def _pieces_by_key(pieces: Iterable[Piece]) -> dict[str, list[Piece]]:
    """``pieces`` grouped by the checkpoint tensor (key) they are stored in, in order."""
    by_key: dict[str, list[Piece]] = defaultdict(list)
    for piece in pieces:
        by_key[piece.key].append(piece)
    return by_key


def _refuse_denied_read(error: BaseException, directory: Path) -> None:
    """Raise :func:`no_read_permission` naming the file where ``error`` (DCP's ``CheckpointException``, or an error
    raised around it) is a read of the checkpoint in ``directory`` this user lacked the permission for (a file made
    unreadable after the checks before the conversion); any other failure is left to the caller, which calls the
    checkpoint damaged."""
    failure = next(iter(error.failures.values()))[0] if isinstance(error, CheckpointException) else error
    if isinstance(failure, PermissionError):
        raise no_read_permission(Path(failure.filename or directory)) from error


def _first_failure(error: CheckpointException) -> str:
    """The type of the first exception behind a DCP ``CheckpointException`` (its message may run over many lines
    and give advice that does not apply, such as torch.load's on ``weights_only``)."""
    return type(next(iter(error.failures.values()))[0]).__name__


def read_metadata(directory: Path) -> Metadata:
    """The DCP metadata of ``directory``; a damaged ``.metadata``, or one this user may not read, is a
    :class:`ConversionError`."""
    path = directory / METADATA_FILE
    if path.is_file() and not os.access(path, os.R_OK):
        raise no_read_permission(path)
    try:
        metadata = dcp.FileSystemReader(directory).read_metadata()
    except Exception as error:  # unpickling a damaged file raises about any type
        raise ConversionError(f"cannot read {path}: {error!r}; is the checkpoint complete?") from error
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise ConversionError(f"{path} is not the metadata of a file-system distributed checkpoint")
    return metadata


def check_data_files(directory: Path, metadata: Metadata) -> list[Path]:
    """The data files ``metadata`` stores items in, each checked to exist, to be readable by this user and to reach
    the end of its last item (a copy cut short, a lost file or one of another user's umask is named here, before any
    tensor is read)."""
    needed: dict[str, int] = {}
    for info in metadata.storage_data.values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str):
            raise ConversionError(f"{directory / METADATA_FILE} does not say which file holds each item; not a "
                                  "file-system distributed checkpoint")
        needed[name] = max(needed.get(name, 0), info.offset + info.length)
    for name, end in sorted(needed.items()):
        path = directory / name
        if not path.is_file():
            raise ConversionError(f"{path} is missing; {METADATA_FILE} stores checkpoint data in it")
        if not os.access(path, os.R_OK):
            raise no_read_permission(path)
        size = path.stat().st_size
        if size < end:
            raise ConversionError(f"{path} has {size} bytes, {METADATA_FILE} stores data up to byte {end}; the file "
                                  "is truncated (copy it again)")
    return [directory / name for name in sorted(needed)]


def _by_name(chunks: Iterable[tuple[Piece, Tensor]]) -> dict[str, Tensor]:
    """Each state-dict name's tensor assembled (:func:`_assemble`) from the chunks of its pieces, as (piece, chunk
    without the piece's lead axes): what :meth:`CheckpointReader.read` and ``read_meta`` return."""
    parts: dict[str, list[tuple[int, Tensor]]] = defaultdict(list)
    for piece, chunk in chunks:
        parts[piece.name].append((piece.rows[0], chunk))
    return {name: _assemble(rows) for name, rows in parts.items()}


def _assemble(rows: list[tuple[int, Tensor]]) -> Tensor:
    """Concatenate row sections (start row, tensor) in row order; one section stays a view of the read buffer
    (the safetensors writer writes it out before the next unit is read)."""
    ordered = [t for _, t in sorted(rows, key=lambda r: r[0])]
    return ordered[0] if len(ordered) == 1 else torch.cat(ordered)
