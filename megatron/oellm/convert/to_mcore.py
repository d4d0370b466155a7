"""hf-to-mcore: an HF safetensors directory to a megatron-core checkpoint, streamed one unit at a time.

Every input is checked against the card before any tensor data is read (names, shapes and dtypes from the
safetensors headers, the HF ``config.json``); the output is written to a temporary sibling directory that is moved
into place at the end and deleted if the conversion fails or is stopped, so a failed conversion leaves nothing
half-written (:mod:`megatron.oellm.convert.output` has the rules for ``--out``). It holds one unit (one decoder
layer, or the embedding / head) of converted tensors plus the source tensors it is built from. What the output
directory holds: :mod:`megatron.oellm.convert.mcore_checkpoint`.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.dist_ckpt import CHECKPOINT_CONFIG_FILE, DATA_FILE, METADATA_FILE, save_streaming
from megatron.oellm.convert.errors import ConversionError, check_folder_access
from megatron.oellm.convert.family import Unit, family_module, hf_to_mcore_unit, iter_hf_to_mcore
from megatron.oellm.convert.hf_config import (
    CONFIG_NAME,
    CardContradiction,
    check_hf_config,
    check_not_quantized,
    parse_json_object,
    read_config_files,
)
from megatron.oellm.convert.hf_names import CanonicalView, canonical_hf_names
from megatron.oellm.convert.mcore_checkpoint import (
    CARD_KEY,
    CHECKPOINT_VERSION,
    HF_CONFIG_KEY,
    ITERATION_FILE,
    RELEASE,
    card_record,
    megatron_checkpoint_args,
)
from megatron.oellm.convert.output import check_not_input, resolved_out, staged_output, writing_output
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.summary import ConversionSummary, bytes_of, leftover_notes
from megatron.oellm.convert.tensor_checks import check_hf_tensors, check_one_dtype_per_key, warn_non_finite
from megatron.oellm.convert.termination import TerminationGuard, guarded
from megatron.oellm.convert.vocab_padding import HF_VOCAB_TENSORS


def _is_checkpoint_file(name: str) -> bool:
    """Whether ``name`` is a file :func:`save_streaming` writes into ``release/``."""
    return name in (METADATA_FILE, CHECKPOINT_CONFIG_FILE) or DATA_FILE.fullmatch(name) is not None


_TRACKER_QUOTED = 40
"""Characters of a foreign ``latest_checkpointed_iteration.txt`` quoted in the refusal."""
_TRACKER_READ = 4096
"""Bytes of a ``latest_checkpointed_iteration.txt`` read to tell what it says (megatron's hold a number or
``release``): enough for the quote after any whitespace a hand-written one starts with."""


def _foreign_tracker(tracker: Path) -> list[str]:
    """``[]`` if ``tracker`` (``--out``'s ``latest_checkpointed_iteration.txt``) says ``release``, as the one this
    converter writes does; else the file with what it says, for the refusal: a training run's tracker (``100``)
    replaced by ``release`` would point its ``--load`` at a checkpoint that is not there, or at the converted one.
    The quote is the text stripped of whitespace, cut at :data:`_TRACKER_QUOTED` characters (not bytes: a UTF-8
    character is never split) with ``...`` only where something was cut."""
    with open(tracker, "rb") as file:
        head = file.read(_TRACKER_READ)
        longer = bool(file.read(1))
    says = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(head, final=not longer).strip()
    if says == RELEASE and not longer:
        return []
    cut = longer or len(says) > _TRACKER_QUOTED
    quoted = says[:_TRACKER_QUOTED] + ("..." if cut else "")
    return [f"{ITERATION_FILE} (saying {quoted!r} rather than {RELEASE!r})"]


def _foreign_in_mcore_output(entry: Path) -> list[str]:
    """What ``entry`` of ``--out`` holds that hf-to-mcore does not write (see :data:`output.Foreign`): anything but
    the iteration file saying ``release`` and a ``release/`` directory of checkpoint files (a user's notes, a
    training run's tracker or a checkpoint megatron training saved there would be deleted with it)."""
    if entry.name == ITERATION_FILE and entry.is_file():
        return _foreign_tracker(entry)
    if entry.name == RELEASE and entry.is_dir() and not entry.is_symlink():
        names = sorted(path.name for path in entry.iterdir())
        return [f"{RELEASE}/{name}" for name in names if not _is_checkpoint_file(name)]
    return [entry.name]


def _check_config_of_weights(card: ModelCard, config_text: str, where: str,
                             tensors: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> None:
    """:func:`check_hf_config` of the ``config.json`` that came with the weights ``tensors`` (canonical name ->
    (shape, dtype)): a vocabulary other than the embedding's rows is named as such, and a refusal of a config's
    sizes (:attr:`CardContradiction.sizes_only`) whose weights have the card's shapes says that the config, not the
    card, is what disagrees (it told the user to pick another card, which no card would fit)."""
    embedding = tensors.get(HF_VOCAB_TENSORS[0])
    rows = embedding[0][0] if embedding and embedding[0] else None
    try:
        check_hf_config(card, config_text, where, embedding_rows=rows)
    except CardContradiction as refusal:
        if not refusal.sizes_only:  # RoPE, activation, norms: tensor shapes cannot tell who is right
            raise
        try:
            check_hf_tensors(card, tensors)
        except ConversionError:
            raise refusal from None
        raise ConversionError(f"{refusal} (every tensor of the checkpoint has card {card.name}'s shape: its "
                              "config.json may contradict its own weights)") from None


def _refuse_megatron_checkpoint(hf_dir: Path) -> None:
    """Raise if ``hf_dir`` (``--hf``) is a megatron checkpoint, or one of its iterations: the directions swapped,
    which would otherwise be refused as a directory without safetensors, with advice about ``.bin`` files."""
    marker = next((hf_dir / name for name in (ITERATION_FILE, METADATA_FILE) if (hf_dir / name).is_file()), None)
    if marker is not None:
        raise ConversionError(f"--hf {hf_dir} is a megatron checkpoint (it holds {marker.name}), not a Hugging Face "
                              f"model; convert it with `oellm convert mcore-to-hf --mcore {hf_dir}`")


def hf_to_mcore_checkpoint(card: ModelCard, hf_dir: Path, out_dir: Path, overwrite: bool = False,
                           guard: TerminationGuard | None = None) -> ConversionSummary:
    """Convert the HF checkpoint ``hf_dir`` to a megatron-core checkpoint in ``out_dir`` (see module doc). SIGTERM /
    SIGHUP / SIGINT at any point end it with :class:`ConversionInterrupted`, also during the checks (seconds at 235B
    scale); the summary names ``out_dir`` as an absolute path. ``guard``: the caller's, entered, when it reports on
    the output before leaving it (a signal meanwhile is then named after the report); else the conversion's own."""
    with guarded(guard) as guard:
        return _hf_to_mcore(card, hf_dir, out_dir, overwrite, guard)


def _hf_to_mcore(card: ModelCard, hf_dir: Path, out_dir: Path, overwrite: bool,
                 guard: TerminationGuard) -> ConversionSummary:
    """:func:`hf_to_mcore_checkpoint` within its termination guard; ``out_dir`` is resolved (:func:`resolved_out`)
    after the checks of the source, so that a missing ``--hf`` is named before a broken ``--out``."""
    module = family_module(card)
    check_folder_access(hf_dir, f"--hf {hf_dir}", lists=True)
    _refuse_megatron_checkpoint(hf_dir)
    config_files = read_config_files(hf_dir)
    config_path = str(hf_dir / CONFIG_NAME)
    if CONFIG_NAME in config_files:  # before the weights: a quantized model's are refused as missing tensors
        check_not_quantized(parse_json_object(config_files[CONFIG_NAME], config_path), config_path)
    source = SafetensorsSource(hf_dir)
    header = source.shapes()
    names, skipped = canonical_hf_names(header)
    tensors = {canonical: header[stored] for canonical, stored in names.items()}
    if CONFIG_NAME in config_files:
        _check_config_of_weights(card, config_files[CONFIG_NAME], config_path, tensors)
    check_hf_tensors(card, tensors)
    meta = {name: torch.empty(shape, dtype=dtype, device="meta") for name, (shape, dtype) in header.items()}
    chunks, unit_of = [], {}
    for unit, tensors in iter_hf_to_mcore(card, meta):
        for name, tensor in tensors.items():
            unit_of[name] = unit
            chunks += [(p, tensor.dtype) for p in mcore_layout.pieces(card, module.MCORE_MODEL, name,
                                                                         tuple(tensor.shape))]
    sources_of_unit = functools.cache(lambda unit: _hf_sources(card, unit, meta))
    check_one_dtype_per_key(chunks, lambda name: sources_of_unit(unit_of[name])[name])
    out_dir = resolved_out(out_dir)
    check_not_input(out_dir, [hf_dir, *source.input_files(), *(hf_dir / name for name in config_files)])
    view = CanonicalView(source)
    common = {"checkpoint_version": CHECKPOINT_VERSION, "iteration": 0, "args": megatron_checkpoint_args(card),
              CARD_KEY: card_record(card), HF_CONFIG_KEY: config_files}
    with staged_output(out_dir, overwrite, _foreign_in_mcore_output, bytes_of(chunks), guard) as staging:
        save_streaming(staging / RELEASE, chunks, unit_of, lambda unit: _import_unit(card, unit, view, source), common)
        with writing_output(staging / ITERATION_FILE):
            (staging / ITERATION_FILE).write_text(RELEASE + "\n")
    notes = _kept_config_notes(hf_dir, config_files) + leftover_notes(out_dir)
    return ConversionSummary(out_dir, len(names), len(unit_of), skipped, notes=notes)


def _hf_sources(card: ModelCard, unit: Unit, meta: dict[str, torch.Tensor]) -> dict[str, list[str]]:
    """The HF tensors (names as ``meta``, the checkpoint's headers, holds them) each megatron tensor of ``unit`` is
    made of, in the order the converter reads them (q, k, v; gate, up), for a refusal to name what the user's files
    hold. The unit is converted again on ``meta`` tensors that require gradients, and the autograd graph of each
    output is walked back to its leaves: exact for every way a converter combines tensors (fused, stacked, shifted),
    and only run for a refusal. Autograd is switched on also under a caller's ``torch.inference_mode``, in which
    ``enable_grad`` records nothing; a tensor whose graph reaches no HF tensor gets ``[]``."""
    reads = _TrackedReads(meta)
    with torch.inference_mode(False), torch.enable_grad():
        converted = hf_to_mcore_unit(card, unit, CanonicalView(reads))
    return {name: reads.sources(tensor) for name, tensor in converted.items()}


class _TrackedReads(Mapping[str, torch.Tensor]):
    """``meta`` with each tensor read as a fresh meta-device autograd leaf of its shape and dtype (floating-point
    ones require gradients), remembered in the order read so that :meth:`sources` names a megatron tensor's HF
    tensors in the order they are combined."""

    def __init__(self, meta: dict[str, torch.Tensor]) -> None:
        self._meta = meta
        self._read: dict[str, torch.Tensor] = {}

    def __getitem__(self, stored: str) -> torch.Tensor:
        if stored not in self._read:
            tensor = self._meta[stored]
            fresh = torch.empty_like(tensor, device="meta")  # not an inference tensor, if ``meta`` holds them
            self._read[stored] = fresh.requires_grad_(tensor.is_floating_point())
        return self._read[stored]

    def __contains__(self, stored: object) -> bool:
        return stored in self._meta

    def __iter__(self) -> Iterator[str]:
        return iter(self._meta)

    def __len__(self) -> int:
        return len(self._meta)

    def sources(self, tensor: torch.Tensor) -> list[str]:
        """The stored names of the tensors read so far that ``tensor`` was computed from, in the order read."""
        leaves = _autograd_leaves(tensor)
        return [stored for stored, read in self._read.items() if id(read) in leaves]


def _autograd_leaves(tensor: torch.Tensor) -> set[int]:
    """The ids of the leaf tensors ``tensor`` was computed from (itself if it is one), found through its autograd
    graph: each leaf is the ``variable`` of an ``AccumulateGrad`` node."""
    if tensor.grad_fn is None:
        return {id(tensor)}
    leaves, pending, seen = set(), [tensor.grad_fn], set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            leaves.add(id(node.variable))
        pending += [parent for parent, _ in node.next_functions]
    return leaves


def _import_unit(card: ModelCard, unit: Unit, view: CanonicalView,
                 source: SafetensorsSource) -> dict[str, torch.Tensor]:
    """The megatron tensors of one unit from ``view`` (of ``source``), whose files are closed afterwards so that
    the pages read for this unit leave resident memory once its tensors are written (see
    :meth:`SafetensorsSource.close_files`); NaN and infinity are named (:func:`warn_non_finite`)."""
    tensors = hf_to_mcore_unit(card, unit, view)
    source.close_files()
    warn_non_finite(tensors)
    return tensors


def _kept_config_notes(hf_dir: Path, files: dict[str, str]) -> list[str]:
    """Report lines on the HF config files (``files``, read from ``hf_dir``) hf-to-mcore keeps with the checkpoint."""
    notes = [f"kept {' and '.join(files)} with the checkpoint for mcore-to-hf"] if files else []
    if CONFIG_NAME not in files:
        notes.append(f"no {CONFIG_NAME} in {hf_dir}: checked against the card by tensor shapes only; mcore-to-hf "
                     "will write the card's config")
    return notes
