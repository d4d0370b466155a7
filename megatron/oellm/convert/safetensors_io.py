"""Hugging Face safetensors checkpoints, read lazily and written in shards with an index.

Reading opens a file (memory-mapped by safetensors) when a tensor of it is first asked for, until
:meth:`SafetensorsSource.close_files`, and loads a tensor only when it is asked for, so a conversion holds one unit's
tensors, never the model. Writing streams: the names, shapes and dtypes of every tensor
are known up front (a planning pass), so each shard's header is written when its first tensor arrives and every
tensor's bytes go straight to their place in the file (the order safetensors' own writer gives them, each aligned to
its element size); no shard is held in memory. The files are
``model-0000i-of-0000N.safetensors`` plus ``model.safetensors.index.json`` (a single shard is written as
``model.safetensors``), the layout ``save_pretrained`` writes and ``from_pretrained`` reads.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from megatron.oellm.convert.errors import ConversionError, listed, no_read_permission
from megatron.oellm.convert.output import writing_output
from megatron.oellm.paths import LFS_POINTER_FIX, is_lfs_pointer

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_SHARD_NAME = re.compile(r"model-(?P<number>\d{5,})-of-(?P<total>\d{5,})\.safetensors")
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30
"""Shard size of HF output: 5 GiB, the ``5GB`` (powers of 1024) of ``oellm convert mcore-to-hf --max-shard-size``
(transformers 4.x's ``save_pretrained`` wrote 5 GB shards, powers of 1000; 5.x writes 50 GB ones)."""
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_DTYPE_NAMES = {**{dtype: name for name, dtype in _DTYPES.items()},
                torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}
"""safetensors' dtype names the writer writes: those read, plus FP8 (written as safetensors does; conversion reads
refuse it, as a quantized checkpoint)."""
_DATA_ORDER = ("I64", "F64", "F32", "I32", "BF16", "F16", "I16", "F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL")
"""The order of dtypes in a file ``safetensors.torch.save_file`` writes (widest element first)."""
_DATA_RANK = {dtype: _DATA_ORDER.index(name) for dtype, name in _DTYPE_NAMES.items()}
"""Each writable dtype's place in :data:`_DATA_ORDER`."""
_HEADER_ALIGNMENT = 8
"""safetensors pads its JSON header with spaces to a multiple of 8 bytes, so that the data that follows is aligned."""
Layout = list[tuple[str, tuple[int, ...], torch.dtype]]
"""(name, shape, dtype) of every tensor of a checkpoint, in the order they are written."""
EXPORT_MARK = {"oellm_export": "mcore-to-hf"}
"""What every file :class:`ShardedSafetensorsWriter` writes carries in its metadata (a shard's ``__metadata__``, the
index's ``metadata``; readers, transformers' included, ignore keys they do not know): ``--overwrite`` replaces only
marked files (:func:`carries_export_mark`), so a Hugging Face checkpoint of the same file names is never taken for
a previous export and deleted."""
_MAX_HEADER_BYTES = 100 * 2**20
"""safetensors' own limit on a header's length: a larger length field is not a safetensors file."""


def _open(path: Path) -> safe_open:
    """``safe_open`` of one checkpoint file; an unreadable file (truncated, not safetensors, or without read
    permission, which safetensors reports as a missing file) is a :class:`ConversionError` naming it. A Git LFS
    pointer (a ``git clone`` without git-lfs) is named as one: safetensors calls its first bytes a header too large,
    and downloading again with git gives the same pointer."""
    if path.is_file() and not os.access(path, os.R_OK):
        raise no_read_permission(path)
    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError) as error:
        if is_lfs_pointer(path):
            raise ConversionError(f"{path} is a Git LFS pointer file, not the weights: {LFS_POINTER_FIX}") from error
        raise ConversionError(f"cannot read {path}: {error}; is the file complete (re-download it)?") from error


def _read_index(index: Path) -> dict[str, str]:
    """The ``weight_map`` of a ``model.safetensors.index.json``; an unreadable or malformed index is a
    :class:`ConversionError`."""
    try:
        text = index.read_text()
    except OSError as error:  # e.g. a shared cache downloaded with another user's umask
        raise ConversionError(f"cannot read {index}: {error}") from error
    try:
        weight_map = json.loads(text)["weight_map"]
    except (ValueError, KeyError, TypeError) as error:
        raise ConversionError(f"{index} is not a safetensors index (JSON with a 'weight_map' of tensor name -> "
                              f"file): {error!r}") from error
    if not isinstance(weight_map, dict):
        raise ConversionError(f"{index}: 'weight_map' must map tensor names to files")
    for name, file in weight_map.items():
        if not isinstance(file, str) or not file or file in (".", "..") or Path(file).name != file:
            raise ConversionError(f"{index} maps tensor {name!r} to {file!r}, not to a safetensors file name beside "
                                  "the index (a path would read outside the checkpoint folder); the index is damaged "
                                  "(download it again)")
    return weight_map


def is_written_name(name: str) -> bool:
    """Whether ``name`` is a file name :class:`ShardedSafetensorsWriter` gives (single file, shard or index)."""
    return name in (SINGLE_NAME, INDEX_NAME) or _SHARD_NAME.fullmatch(name) is not None


def _file_metadata(path: Path) -> object:
    """The metadata of a safetensors file (its header's ``__metadata__``) or of an index (its ``metadata``); None
    where ``path`` is neither, or cannot be read."""
    try:
        if path.name == INDEX_NAME:
            return json.loads(path.read_text()).get("metadata")
        with open(path, "rb") as file:
            length = struct.unpack("<Q", file.read(8))[0]
            if length > _MAX_HEADER_BYTES:
                return None
            return json.loads(file.read(length)).get("__metadata__")
    except (OSError, ValueError, struct.error, AttributeError):  # unreadable, not JSON, too short, not an object
        return None


def carries_export_mark(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a link: a Hugging Face cache snapshot links into its blobs) that
    :class:`ShardedSafetensorsWriter` wrote: a shard or index whose metadata holds :data:`EXPORT_MARK`."""
    if path.is_symlink() or not path.is_file() or not is_written_name(path.name):
        return False
    metadata = _file_metadata(path)
    return isinstance(metadata, dict) and all(metadata.get(key) == value for key, value in EXPORT_MARK.items())


def _indexed_files(directory: Path, index: Path) -> dict[str, Path]:
    """Tensor name -> file of a sharded checkpoint, from its ``index``; a shard the index names that is missing, or a
    shard file beside it that the index does not name (the index and the shards of different saves, e.g. a download
    cut short or a stale shard of an older revision), is a :class:`ConversionError` naming the files."""
    files = {name: directory / file for name, file in _read_index(index).items()}
    listed = set(files.values())
    missing = sorted(f.name for f in listed if not f.is_file())
    if missing:
        raise ConversionError(f"{index} lists {len(missing)} shard(s) that are not in {directory}: "
                              f"{', '.join(missing[:3])}; download the missing shards")
    unlisted = sorted(p.name for p in directory.glob("*.safetensors")
                      if _SHARD_NAME.fullmatch(p.name) and p not in listed)
    if unlisted:
        raise ConversionError(f"{directory} holds shard(s) {', '.join(unlisted[:3])} that {index.name} does not list; "
                              "the index and the shards are of different saves: remove the stale shards or download "
                              "the checkpoint again")
    return files


def _where_the_weights_are(directory: Path) -> str:
    """Advice for an ``--hf`` without safetensors: the folders up to two levels below holding them (``--hf`` given one
    level too high, e.g. a Hugging Face cache entry whose weights are in ``snapshots/<revision>/``), else, where it
    holds PyTorch ``pytorch_model*.bin`` weights, to convert them first, else the weights of another format it holds
    (:data:`OTHER_WEIGHT_FORMATS`), else that it holds no weights at all."""
    found = sorted({path.parent for pattern in ("*/*.safetensors", "*/*/*.safetensors")
                    for path in directory.glob(pattern)})
    if found:
        return f"pass the folder of the model with --hf: {listed(found, 3)}"
    pytorch = sorted(path.name for path in directory.glob("pytorch_model*.bin"))
    if pytorch:
        return (f"it holds PyTorch .bin weights ({listed(pytorch, 2)}): convert them to safetensors with transformers "
                "first (from_pretrained, then save_pretrained) and pass that folder with --hf")
    other = sorted(path.name for pattern in OTHER_WEIGHT_FORMATS for path in directory.glob(pattern))
    if other:
        return (f"it holds weights in another format ({listed(other, 2)}), which this converter does not read: a "
                "Hugging Face safetensors checkpoint of the model (model*.safetensors beside config.json) is what "
                "--hf takes")
    return ("it holds no weight files (an incomplete download, or not the model's folder): pass --hf the folder with "
            "config.json and model*.safetensors")


OTHER_WEIGHT_FORMATS = ("*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.gguf")
"""Weight files of formats other than safetensors (PyTorch pickles such as ``consolidated.00.pth``, TensorFlow, Flax,
GGUF), named in the refusal of an ``--hf`` folder without safetensors rather than called a folder without weights
(a ``.bin`` other than ``pytorch_model*.bin`` is not: ``training_args.bin`` is a trainer's settings)."""


def _check_shard_numbers(directory: Path, names: list[str]) -> None:
    """Without an index, raise naming the shards that the ``model-0000K-of-0000N.safetensors`` files among ``names``
    (of ``directory``) lack (a download cut short), or the files of each total N where two totals are mixed (shards
    of two saves in one folder): otherwise the first tensor of a missing shard is reported as missing from the
    model, and the user looks for a wrong card instead of a missing file."""
    saves: dict[str, list[re.Match[str]]] = {}
    for name in names:
        shard = _SHARD_NAME.fullmatch(name)
        if shard:
            saves.setdefault(shard["total"], []).append(shard)
    if len(saves) > 1:
        each = "; ".join(f"{len(shards)} of -of-{total}: {listed([shard.string for shard in shards], 2)}"
                         for total, shards in sorted(saves.items()))
        raise ConversionError(f"{directory} holds shards of {len(saves)} saves and no {INDEX_NAME} ({each}); keep "
                              "the files of one save (remove the stale shards or download the checkpoint again)")
    for shards in saves.values():
        _check_one_save(directory, shards)


_MISSING_NAMED = 3
"""Missing shard files a refusal names (then how many more)."""


def _check_one_save(directory: Path, shards: list[re.Match[str]]) -> None:
    """Raise naming the shards numbered 1 to N that ``shards`` (the :data:`_SHARD_NAME` matches of one save's files,
    one total N) lack, or those numbered outside 1 to N or twice. Numbers are compared as integers, so that any zero
    padding is read (transformers pads to 5 digits: ``model-00001-of-123456``; a missing file is named with the
    padding of the present ones); missing names are found one by one, never all N of them listed (a name claiming
    99999999999 shards)."""
    total_text = shards[0]["total"]
    total, files = int(total_text), sorted(shard.string for shard in shards)
    if total == 0:
        raise ConversionError(f"{directory} holds shard(s) {listed(files, 3)} of a total of 0 (and has no "
                              f"{INDEX_NAME}): no save writes such names; keep the files of one save")
    holders: dict[int, list[str]] = {}
    for shard in sorted(shards, key=lambda shard: shard.string):
        holders.setdefault(int(shard["number"]), []).append(shard.string)
    twice = next(((number, names) for number, names in holders.items() if len(names) > 1), None)
    if twice:
        raise ConversionError(f"{directory} holds shard number {twice[0]} of {total} twice, {' and '.join(twice[1])} "
                              f"(and has no {INDEX_NAME}); keep the files of one save")
    present = {number for number in holders if 1 <= number <= total}
    if len(present) < total:
        width = len(shards[0]["number"])
        absent = (number for number in range(1, total + 1) if number not in present)
        named = [f"model-{number:0{width}d}-of-{total_text}.safetensors"
                 for number in itertools.islice(absent, _MISSING_NAMED)]
        more = f" and {total - len(present) - len(named)} more" if total - len(present) > len(named) else ""
        raise ConversionError(f"{directory} lacks shard(s) {', '.join(named)}{more} of {total} (and has no "
                              f"{INDEX_NAME}); download the missing shards")
    outside = sorted(names[0] for number, names in holders.items() if number not in present)
    if outside:
        raise ConversionError(f"{directory} holds shard(s) {listed(outside, 3)} numbered outside the 1 to {total} "
                              f"their names count (and has no {INDEX_NAME}); keep the files of one save")


def checkpoint_files(directory: Path) -> tuple[dict[str, Path], Path | None]:
    """Tensor name -> safetensors file of an HF checkpoint directory (index json, or every ``*.safetensors``), and
    the index file if the checkpoint has one. The index is looked up once here, so that the tensors, the check of the
    shards against it and the input files a conversion protects all describe the same checkpoint."""
    if not directory.is_dir():
        raise ConversionError(f"{directory} is not a directory; pass the HF checkpoint directory "
                              "(with config.json and *.safetensors)")
    index = directory / INDEX_NAME
    if index.is_file():
        if (directory / SINGLE_NAME).exists():
            raise ConversionError(f"{directory} holds both {INDEX_NAME} and {SINGLE_NAME}: transformers reads "
                                  f"{SINGLE_NAME}, this converter would read the index; remove the stale one")
        return _indexed_files(directory, index), index
    paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        raise ConversionError(f"no *.safetensors in {directory}; {_where_the_weights_are(directory)}")
    _check_shard_numbers(directory, [path.name for path in paths])
    files = {}
    for path in paths:
        with _open(path) as handle:
            for name in handle.keys():
                if name in files:
                    raise ConversionError(f"tensor {name!r} is in both {files[name]} and {path} and there is no "
                                          f"{INDEX_NAME} to pick one; remove the stale file")
                files[name] = path
    return files, None


class SafetensorsSource(Mapping[str, Tensor]):
    """The tensors of an HF checkpoint directory, loaded one at a time on access."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._files, self._index = checkpoint_files(directory)
        self._handles: dict[Path, object] = {}

    def input_files(self) -> list[Path]:
        """Every file the tensors are read from, plus the index if there is one."""
        return sorted(set(self._files.values())) + ([self._index] if self._index is not None else [])

    def _handle(self, path: Path) -> object:
        """The open safetensors file at ``path``, opened once and kept for the conversion's later reads."""
        if path not in self._handles:
            self._handles[path] = _open(path)
        return self._handles[path]

    def shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Name -> (shape, dtype) of every tensor, from the file headers (no tensor data is read); a tensor missing
        from the file the index names, in a shard but not in the index, or of a dtype not in ``_DTYPES`` (e.g. FP8), is
        a :class:`ConversionError`."""
        out = {}
        for name, path in self._files.items():
            try:
                piece = self._handle(path).get_slice(name)
            except SafetensorError as error:
                raise ConversionError(f"{self._index} puts tensor {name!r} in {path.name}, "
                                      "which does not contain it; the index and the shards do not match") from error
            dtype = _DTYPES.get(piece.get_dtype())
            if dtype is None:
                raise ConversionError(f"tensor {name!r} in {path} has dtype {piece.get_dtype()}, which conversion "
                                      f"does not read ({', '.join(_DTYPES)}); is it a quantized checkpoint?")
            out[name] = (tuple(piece.get_shape()), dtype)
        self._check_shards_hold_only_indexed()
        return out

    def _check_shards_hold_only_indexed(self) -> None:
        """With an index, raise naming a tensor a shard holds that the index does not list: transformers would load
        it from the shard while this converter reads the index, so the two would not agree on what the model is."""
        if self._index is None:
            return
        for path in sorted(set(self._files.values())):
            extra = sorted(name for name in self._handle(path).keys() if self._files.get(name) != path)
            if extra:
                raise ConversionError(f"{path} holds tensor {extra[0]!r} ({len(extra)} such) that "
                                      f"{self._index} does not list in that file; the index and the "
                                      "shards do not match (download the index again)")

    def __getitem__(self, name: str) -> Tensor:
        return self._handle(self._files[name]).get_tensor(name)

    def close_files(self) -> None:
        """Close the open files; the next access opens them again. safetensors maps a whole file into memory and
        every page read stays resident while the file is open (once the tensors viewing it are gone too, it is
        unmapped): a conversion that kept its files open would end up with the whole model in its resident memory,
        which Slurm's accounting and memory limits count."""
        self._handles.clear()

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def tensor_nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype``."""
    return math.prod(shape) * dtype.itemsize


def _plan_shards(layout: Layout, max_shard_bytes: int) -> list[Layout]:
    """``layout`` cut into shards in order: a new shard starts where a tensor would take the current one past
    ``max_shard_bytes`` (a tensor larger than that gets a shard of its own); an empty layout is one empty shard."""
    shards: list[Layout] = [[]]
    size = 0
    for entry in layout:
        nbytes = tensor_nbytes(entry[1], entry[2])
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
    return shards


def _data_order(shard: Layout) -> Layout:
    """``shard``'s tensors in the order their bytes lie in its file: by :data:`_DATA_ORDER`, then by name, as
    safetensors' own writer lays them out. With the header padded to 8 bytes, every tensor then starts at a multiple
    of its element size, so readers that view the mapped file in place (``torch.UntypedStorage.from_file`` +
    ``view``, zero-copy loaders) can; in arrival order an fp32 tensor after a bf16 one of odd length would start
    misaligned."""
    return sorted(shard, key=lambda entry: (_DATA_RANK.get(entry[2], -1), entry[0]))  # -1: refused by _header


def _header(shard: Layout, metadata: Mapping[str, str]) -> tuple[bytes, dict[str, int]]:
    """The safetensors header of a file holding ``shard``'s tensors (the little-endian 8-byte length, then the JSON:
    ``format: pt`` as ``save_file`` writes it, :data:`EXPORT_MARK` and the writer's ``metadata``, then dtype, shape and
    byte range of every
    tensor in :func:`_data_order`, padded with spaces to :data:`_HEADER_ALIGNMENT`), and the file offset of each
    tensor's bytes, where they are written whatever order the tensors arrive in."""
    entries: dict[str, object] = {"__metadata__": {"format": "pt", **metadata, **EXPORT_MARK}}
    offset = 0
    for name, shape, dtype in _data_order(shard):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"tensor {name!r} has dtype {dtype}, which safetensors output does not take here "
                             f"({', '.join(map(str, _DTYPE_NAMES))})")
        end = offset + tensor_nbytes(shape, dtype)
        entries[name] = {"dtype": _DTYPE_NAMES[dtype], "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % _HEADER_ALIGNMENT)
    start = 8 + len(text)
    positions = {name: start + entry["data_offsets"][0] for name, entry in entries.items() if name != "__metadata__"}
    return struct.pack("<Q", len(text)) + text, positions


def _write_tensor(file: BinaryIO, tensor: Tensor) -> None:
    """``tensor``'s bytes as stored in safetensors (row-major, little-endian), written from its own memory: a copy
    is made only of a non-contiguous tensor (one tensor, never a shard)."""
    flat = tensor.detach().contiguous().reshape(-1)
    file.write(flat.view(torch.uint8).numpy().data)


class ShardedSafetensorsWriter:
    """Writes the tensors of ``layout``, in its order, to numbered safetensors shards of at most ``max_shard_bytes``
    and an index json, streaming (see module doc): memory holds the tensor being written, never a shard.
    ``metadata`` (string values, as safetensors takes them) goes into every file's metadata next to
    :data:`EXPORT_MARK`: where the export came from."""

    def __init__(self, directory: Path, layout: Iterable[tuple[str, tuple[int, ...], torch.dtype]],
                 max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, metadata: Mapping[str, str] | None = None) -> None:
        self.directory = directory
        self._metadata = dict(metadata or {})
        self._layout = [(name, tuple(shape), dtype) for name, shape, dtype in layout]
        self._shards = _plan_shards(self._layout, max_shard_bytes)
        self._written = 0
        """How many tensors of ``_layout`` are in their files."""
        self._file: BinaryIO | None = None
        self._positions: dict[str, int] = {}
        """File offset of each tensor of the open shard not written yet (see :func:`_header`)."""
        self._paths: list[Path] = []
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, tensors: Mapping[str, Tensor]) -> None:
        """Write ``tensors``, which must be the next ones of the layout (name, shape and dtype): a shard's header,
        written with its first tensor, already states where each of its tensors is."""
        for name, tensor in tensors.items():
            if self._written == len(self._layout):
                raise ValueError(f"tensor {name!r} is not in the planned layout (all {len(self._layout)} written)")
            planned = self._layout[self._written]
            if (name, tuple(tensor.shape), tensor.dtype) != planned:
                raise ValueError(f"tensor {name!r} {list(tensor.shape)} {tensor.dtype} arrived where the layout "
                                 f"plans {planned[0]!r} {list(planned[1])} {planned[2]}")
            if self._file is None:
                self._open_next_shard()
            with writing_output(self._paths[-1]):
                self._write(name, tensor)

    def _write(self, name: str, tensor: Tensor) -> None:
        """Write ``tensor`` at its place in the open shard, and close the shard after its last tensor."""
        self._file.seek(self._positions.pop(name))
        _write_tensor(self._file, tensor)
        self._written += 1
        if not self._positions:
            self._file.close()
            self._file = None

    def _open_next_shard(self) -> None:
        """Open the next shard's temporary file and write its header."""
        shard = self._shards[len(self._paths)]
        path = self.directory / f"shard-{len(self._paths):05d}.tmp"
        header, self._positions = _header(shard, self._metadata)
        with writing_output(path):
            self._file = open(path, "wb")  # closed after the shard's last tensor, or by __exit__
            self._file.write(header)
        self._paths.append(path)

    def __enter__(self) -> ShardedSafetensorsWriter:
        """The writer, whose open shard file is closed on leaving the block (see :meth:`__exit__`)."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, _traceback: object) -> None:
        """Close the shard file a failure left open (nothing to do after :meth:`close`): the staging directory that
        holds it is removed next, and an open file there survives its deletion on NFS (as ``.nfs*``), leaving the
        partial output behind. Leaving on a failure, an error of the close itself does not replace the failure:
        flushing the bytes a failed write left in the buffer fails again (a stale handle stays stale), and that
        error, naming no file, would replace the first one. It is added to the failure as a note, which a traceback
        shows (the one-line report of a refused write names the first error alone); the file is closed all the
        same."""
        if self._file is None:
            return
        file, self._file = self._file, None
        if exc is None:
            with writing_output(Path(file.name)):
                file.close()
            return
        try:
            file.close()
        except OSError as close_error:
            exc.add_note(f"closing {file.name} failed too: {close_error}")

    def close(self) -> list[Path]:
        """Check every planned tensor was written, give the shards their final names and write the index; returns
        the files."""
        if self._written != len(self._layout):
            raise ValueError(f"{len(self._layout) - self._written} tensors of the layout were not written, the first "
                             f"{self._layout[self._written][0]!r}")
        if not self._layout:  # an empty checkpoint is one empty file
            self._open_next_shard()
            with writing_output(self._paths[-1]):
                self._file.close()
        count = len(self._paths)
        if count == 1:
            final = self.directory / SINGLE_NAME
            self._paths[0].rename(final)
            return [final]
        weight_map, files = {}, []
        for i, (path, shard) in enumerate(zip(self._paths, self._shards, strict=True)):
            final = self.directory / f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            path.rename(final)
            files.append(final)
            weight_map.update(dict.fromkeys((name for name, _, _ in shard), final.name))
        total = sum(tensor_nbytes(shape, dtype) for _, shape, dtype in self._layout)
        index = {"metadata": {"total_size": total, **self._metadata, **EXPORT_MARK},
                 "weight_map": dict(sorted(weight_map.items()))}
        with writing_output(self.directory / INDEX_NAME):
            (self.directory / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        return [*files, self.directory / INDEX_NAME]


def layout_of(tensors: Mapping[str, Tensor]) -> Layout:
    """The :data:`Layout` of ``tensors`` (in their order)."""
    return [(name, tuple(tensor.shape), tensor.dtype) for name, tensor in tensors.items()]
