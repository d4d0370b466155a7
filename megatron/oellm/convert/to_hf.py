"""mcore-to-hf: a megatron-core checkpoint to an HF safetensors directory, streamed one unit at a time.

The checkpoint is checked against the card before any tensor data is read (its metadata, stored card and run
arguments: :mod:`megatron.oellm.convert.stored_checks`); it holds one unit as read and writes each HF tensor straight
into its shard file (the shards' layout is planned on ``meta`` tensors first), whatever the shard size. The output is
staged as :mod:`megatron.oellm.convert.output` describes; with ``--tokenizer`` it also holds the tokenizer files of
that folder (:mod:`megatron.oellm.convert.tokenizer_files`).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.errors import ConversionError, listed
from megatron.oellm.convert.export_config import export_config_files
from megatron.oellm.convert.family import Unit, family_module, iter_mcore_to_hf, mcore_to_hf_unit, unit_shapes, units
from megatron.oellm.convert.hf_config import CONFIG_FILES, CONFIG_NAME
from megatron.oellm.convert.mcore_checkpoint import (
    CARD_KEY,
    ITERATION_FILE,
    RELEASE,
    iteration_of,
    resolve_mcore_dir,
    stored_card_name,
)
from megatron.oellm.convert.output import check_not_input, resolved_out, staged_output, writing_output
from megatron.oellm.convert.safetensors_io import (
    DEFAULT_MAX_SHARD_BYTES,
    INDEX_NAME,
    SINGLE_NAME,
    Layout,
    ShardedSafetensorsWriter,
    carries_export_mark,
    is_written_name,
    layout_of,
)
from megatron.oellm.convert.stored_checks import check_run_arguments, check_stored_card
from megatron.oellm.convert.summary import ConversionSummary, bytes_of, leftover_notes
from megatron.oellm.convert.tensor_checks import warn_non_finite
from megatron.oellm.convert.termination import TerminationGuard, guarded
from megatron.oellm.convert.tokenizer_files import check_tokenizer_dir, copy_tokenizer_files, foreign_in_tokenizer_entry
from megatron.oellm.convert.vocab_padding import (
    VOCAB_TENSORS,
    run_vocab_for_rows,
    stored_padded_vocab,
    strip_vocab_rows,
)

_MODEL_KEY_PREFIXES = ("embedding.", "decoder.", "output_layer.")
"""Checkpoint keys of the language model's own tensors (optimizer state, RNG and MTP keys start otherwise)."""
MTP_KEY_PREFIX = "mtp."
"""Checkpoint keys of megatron-core's multi-token-prediction block (``--mtp-num-layers``): a head the Hugging Face
causal-LM model has no tensors for, so mcore-to-hf leaves them out and lists them in its report."""
_ROUTER_BUFFERS = (".router.expert_bias", ".router.qb_beta")
"""Persistent buffers of megatron-core 0.19.2's router (expert-bias and quantile balancing): routing state that a
Hugging Face Qwen model has no tensor for."""


def _foreign_in_hf_output(entry: Path) -> list[str]:
    """What ``entry`` of ``--out`` holds that mcore-to-hf does not write (see :data:`output.Foreign`): anything but
    the safetensors and index files it marks (:func:`carries_export_mark`) and the config files beside them. A
    Hugging Face checkpoint's files have the same names, but no mark: ``--overwrite`` must not delete a model
    given as ``--out`` by mistake (the source of an export, a download, a cache snapshot's links)."""
    written = is_written_name(entry.name)
    if entry.is_symlink() and (written or entry.name in CONFIG_FILES):  # replacing it would write through one
        return [f"{entry.name} (a link)"]
    if written:
        return [] if carries_export_mark(entry) else [f"{entry.name} (no oellm_export mark)"]
    if entry.name in CONFIG_FILES and entry.is_file():
        return [] if _beside_marked_export(entry) else [_without_marked_export(entry)]
    return [entry.name]


def _beside_marked_export(entry: Path) -> bool:
    """Whether the ``--out`` entry ``entry`` sits beside the weights of a previous export (a ``model.safetensors`` or
    index carrying :func:`carries_export_mark`): only then are the files an export writes besides its weights (config,
    tokenizer) that export's, not a model's or the user's of the same names."""
    return any(carries_export_mark(entry.parent / name) for name in (SINGLE_NAME, INDEX_NAME))


def _without_marked_export(entry: Path) -> str:
    """How a refusal names ``entry``, a file an export writes found in an ``--out`` without a previous export's
    weights."""
    return f"{entry.name} (no marked {SINGLE_NAME} or {INDEX_NAME} beside it)"


def _refuse_unmarked_model(out_dir: Path) -> None:
    """Raise if ``--out`` holds model files (the names mcore-to-hf writes) without its mark, with or without
    ``--overwrite``: another model's files (the export's source, a download), or an export written before the mark
    (by the 0.1.0 release of 2026-11-30, or a checkout older than the mark). Either way the conversion must not
    replace them, and the refusal says why rather than that they are files "this conversion does not write"."""
    try:
        unmarked = sorted(entry.name for entry in out_dir.iterdir()  # links are named as such by the output check
                          if is_written_name(entry.name) and not entry.is_symlink() and not carries_export_mark(entry))
    except OSError:  # not a directory, or unreadable: the output checks name it
        return
    if unmarked:
        raise ConversionError(f"output {out_dir} holds a model ({listed(unmarked, 3)}) without the oellm_export mark "
                              "that mcore-to-hf writes into its files: another model's (the export's source? a "
                              "download?), or an export written before the mark (megatron-oellm's 0.1.0 release of "
                              "2026-11-30 or a checkout older than the mark); --overwrite replaces only marked "
                              "exports: choose another --out, or delete an old export yourself")


def _foreign_in_hf_output_with_tokenizer(entry: Path) -> list[str]:
    """:func:`_foreign_in_hf_output` for an export given ``--tokenizer``, which writes the tokenizer files too: a
    previous export's tokenizer files (beside its marked weights, as its config files) are replaced by the new ones.
    Tokenizer files without such weights beside them are the user's own tokenizer (or a model's), which ``--overwrite``
    would replace and, where the new tokenizer lacks one, delete."""
    if not _foreign_in_hf_output(entry):
        return []
    foreign_to_tokenizer = foreign_in_tokenizer_entry(entry)
    if foreign_to_tokenizer or _beside_marked_export(entry):
        return foreign_to_tokenizer
    return [_without_marked_export(entry)]


def _planned_pieces(card: ModelCard, reader: CheckpointReader, padded: int) -> list[list[mcore_layout.Piece]]:
    """The checkpoint pieces of each unit, every one checked to be stored with the expected shape, and no model
    tensor stored that the card has no place for."""
    module = family_module(card)
    stored = reader.tensor_shapes()
    stored_card = card.with_vocab(padded)  # the megatron side's shapes: vocabulary rows as megatron padded them
    unit_pieces: list[list[mcore_layout.Piece]] = []
    for unit in units(card):
        pieces = [p for name, shape in unit_shapes(stored_card, unit)[1].items()
                  for p in mcore_layout.pieces(card, module.MCORE_MODEL, name, shape)]
        for p in pieces:
            if p.key not in stored:
                raise ConversionError(f"missing tensor {p.key!r} (for {p.name}) in {reader.directory}")
            if stored[p.key][0] != p.global_shape:
                raise ConversionError(f"tensor {p.key!r} has shape {list(stored[p.key][0])}, card {card.name} "
                                      f"expects {list(p.global_shape)}")
        unit_pieces.append(pieces)
    wanted = {p.key for ps in unit_pieces for p in ps}
    unexpected = [key for key in stored if key.startswith(_MODEL_KEY_PREFIXES) and key not in wanted]
    router_state = [key for key in unexpected if key.endswith(_ROUTER_BUFFERS)]
    if router_state:
        raise ConversionError(f"{reader.directory} holds router state {router_state[0]!r} (e.g. the expert bias of "
                              "--moe-router-enable-expert-bias) that the Hugging Face model has no place for; "
                              "without it the converted model would route differently")
    if unexpected:
        raise ConversionError(f"unexpected tensor {unexpected[0]!r} ({len(unexpected)} unexpected) in "
                              f"{reader.directory} for card {card.name}; is --model the right card?")
    return unit_pieces


def _hf_layout(card: ModelCard, reader: CheckpointReader, unit_pieces: list[list[mcore_layout.Piece]]) -> Layout:
    """Name, shape and dtype of every HF tensor the export writes, in order: the conversion run on ``meta`` tensors,
    so that the writer can put each shard's header before its data and never hold a shard."""
    meta = {}
    for pieces in unit_pieces:
        meta.update(strip_vocab_rows(reader.read_meta(pieces), card.vocab_size))
    return [entry for _, tensors in iter_mcore_to_hf(card, meta) for entry in layout_of(tensors)]


def checkpoint_card_default(mcore_dir: Path) -> tuple[str | None, int | None]:
    """The card the checkpoint ``--mcore mcore_dir`` stores (:func:`stored_card_name`) and the vocabulary it was
    saved with (:func:`_stored_vocab_size`): what mcore-to-hf converts with when neither ``--model`` nor
    ``--vocab-size`` is given. Each None if it stores none; :class:`ConversionError` if it cannot be read."""
    reader = CheckpointReader(resolve_mcore_dir(mcore_dir))
    common = reader.common_state()
    shapes = reader.tensor_shapes()
    rows = {shapes[name][0][0] for name in VOCAB_TENSORS if name in shapes}
    return stored_card_name(common), _stored_vocab_size(common, rows)


def _stored_vocab_size(common: dict, rows: set[int]) -> int | None:
    """The vocabulary a checkpoint with vocabulary tensors of ``rows`` rows was saved with: hf-to-mcore's card
    record's ``vocab_size``, else the saving run's stored ``vocab_size`` where megatron's padding of it (at the run's
    tensor-parallel size and divisor) gives exactly those rows; None otherwise. A run that trained another vocabulary
    than its card's is then exported without asking for the ``--vocab-size`` the checkpoint already states."""
    record = common.get(CARD_KEY)
    if isinstance(record, dict):
        stated = record.get("vocab_size")
        return stated if isinstance(stated, int) and not isinstance(stated, bool) else None
    return run_vocab_for_rows(common.get("args"), next(iter(rows))) if len(rows) == 1 else None


def source_iteration(directory: Path, common: dict) -> int | None:
    """The training iteration of the checkpoint in ``directory``: the one its ``iter_XXXXXXX`` name holds (by which
    megatron picks it), else the one its common state stores (0 for hf-to-mcore's ``release``); None if neither
    says."""
    named = iteration_of(directory.name)
    stored = common.get("iteration")
    if named is not None or not isinstance(stored, int) or isinstance(stored, bool):
        return named
    return stored


def source_line(mcore_dir: Path, directory: Path, iteration: int | None) -> str:
    """The report line naming the checkpoint an export read: its iteration directory (absolute) and iteration, and
    whether the run folder's ``latest_checkpointed_iteration.txt`` chose it (``--mcore`` named the folder) or
    ``--mcore`` named it itself; a run folder may hold newer iterations than the one its tracker names."""
    if directory.name == RELEASE:
        what = f"the {RELEASE} checkpoint"
    else:
        what = "the checkpoint" if iteration is None else f"iteration {iteration}"
    how = f"the one {ITERATION_FILE} names" if directory != mcore_dir else "as given with --mcore"
    return f"exported {what} from {directory.absolute()} ({how})"


def _export_unit(card: ModelCard, unit: Unit, reader: CheckpointReader, pieces: list[mcore_layout.Piece],
                 writer: ShardedSafetensorsWriter) -> None:
    """Read one unit's megatron tensors and write its HF tensors with ``writer``. A function of its own so that the unit's read buffers are released when it returns: a loop variable holding them would keep one
    unit alive while the next one is read (twice the largest unit's bytes)."""
    tensors = mcore_to_hf_unit(card, unit, strip_vocab_rows(reader.read(pieces), card.vocab_size))
    warn_non_finite(tensors)
    writer.add(tensors)


def _tokenizer_note(tokenizer_dir: Path | None, names: list[str]) -> str:
    """The report line on the export's tokenizer: the files copied from ``tokenizer_dir``, or, without one, that it
    has none, which ``from_pretrained`` of the model does not show but AutoTokenizer, lm-eval and vLLM fail on."""
    if tokenizer_dir is None:
        return ("note: no tokenizer files were written (no --tokenizer given); pass --tokenizer DIR (the HF model's "
                "folder) for an export that AutoTokenizer, lm-eval and vLLM load as is")
    return f"copied {len(names)} tokenizer files from --tokenizer {tokenizer_dir}: {', '.join(names)}"


def mcore_to_hf_checkpoint(card: ModelCard, mcore_dir: Path, out_dir: Path, overwrite: bool = False,
                           max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, hf_config_dir: Path | None = None,
                           tokenizer_dir: Path | None = None, guard: TerminationGuard | None = None
                           ) -> ConversionSummary:
    """Convert the megatron-core checkpoint ``mcore_dir`` to an HF safetensors checkpoint in ``out_dir``; vocabulary
    rows megatron padded past the card's vocabulary are dropped, and so is a multi-token-prediction block
    (:data:`MTP_KEY_PREFIX`, listed in the summary's ``skipped``). ``config.json`` / ``generation_config.json`` are
    those of ``hf_config_dir``, else those stored with the checkpoint, else the card's config. With
    ``tokenizer_dir`` the export also holds that folder's tokenizer files (:mod:`tokenizer_files`), and a previous
    export's tokenizer files in ``out_dir`` are replaced rather than refused as foreign. SIGTERM / SIGHUP / SIGINT at
    any point end it with :class:`ConversionInterrupted`; the summary names ``out_dir`` as an absolute path.
    ``guard``: the caller's, entered, when it reports on the output before leaving it (a signal meanwhile is then
    named after the report); else the conversion's own."""
    with guarded(guard) as guard:
        return _mcore_to_hf(card, mcore_dir, out_dir, overwrite, max_shard_bytes, hf_config_dir, tokenizer_dir, guard)


def _mcore_to_hf(card: ModelCard, mcore_dir: Path, out_dir: Path, overwrite: bool, max_shard_bytes: int,
                 hf_config_dir: Path | None, tokenizer_dir: Path | None, guard: TerminationGuard) -> ConversionSummary:
    """:func:`mcore_to_hf_checkpoint` within its termination guard; ``out_dir`` is resolved (:func:`resolved_out`)
    after the checks of the sources, so that a missing ``--mcore`` is named before a broken ``--out``."""
    tokenizer_names = check_tokenizer_dir(tokenizer_dir, card.vocab_size) if tokenizer_dir is not None else []
    module = family_module(card)
    reader = CheckpointReader(resolve_mcore_dir(mcore_dir))
    stored = reader.tensor_shapes()
    common = reader.common_state()
    check_stored_card(card, common)
    check_run_arguments(card, common.get("args"))
    config_files, config_note = export_config_files(card, common, reader.directory, hf_config_dir)
    padded = stored_padded_vocab(card.vocab_size, {n: stored[n][0][0] for n in VOCAB_TENSORS if n in stored},
                                 common.get("args"))
    unit_pieces = _planned_pieces(card, reader, padded)
    config_inputs = [hf_config_dir / name for name in config_files] if hf_config_dir is not None else []
    tokenizer_inputs = [tokenizer_dir / name for name in tokenizer_names] if tokenizer_dir is not None else []
    iteration = source_iteration(reader.directory, common)
    out_dir = resolved_out(out_dir)
    check_not_input(out_dir, [mcore_dir, reader.directory, *reader.input_files(), *config_inputs, *tokenizer_inputs])
    needed = bytes_of((piece, stored[piece.key][1]) for pieces in unit_pieces for piece in pieces)
    layout = _hf_layout(card, reader, unit_pieces)
    foreign = _foreign_in_hf_output_with_tokenizer if tokenizer_dir is not None else _foreign_in_hf_output
    _refuse_unmarked_model(out_dir)
    with (staged_output(out_dir, overwrite, foreign, needed, guard) as staging,
          ShardedSafetensorsWriter(staging, layout, max_shard_bytes,
                                   _source_metadata(reader.directory, iteration)) as writer):
        if tokenizer_dir is not None:
            copy_tokenizer_files(tokenizer_dir, tokenizer_names, staging)
        for unit, pieces in zip(units(card), unit_pieces, strict=True):
            _export_unit(card, unit, reader, pieces, writer)
        writer.close()  # refuses an export that did not write every tensor of the layout
        _write_config_files(config_files, module, card, staging)
    return ConversionSummary(out_dir, sum(len({p.name for p in ps}) for ps in unit_pieces), len(layout),
                             sorted(key for key in stored if key.startswith(MTP_KEY_PREFIX)), padded - card.vocab_size,
                             [config_note, _tokenizer_note(tokenizer_dir, tokenizer_names), *leftover_notes(out_dir)],
                             source_line(mcore_dir, reader.directory, iteration))


def _write_config_files(config_files: dict[str, str], module: ModuleType, card: ModelCard, staging: Path) -> None:
    """Write the export's ``config_files`` (name -> text) into ``staging``, and ``card``'s ``config.json`` (by its
    family ``module``) where they hold none; an operating-system error naming no file names the one written
    (:func:`writing_output`)."""
    for name, text in config_files.items():
        with writing_output(staging / name):
            (staging / name).write_bytes(text.encode("utf-8"))
    if CONFIG_NAME not in config_files:
        with writing_output(staging / CONFIG_NAME):
            module.hf_config_from_card(card).save_pretrained(staging)


def _source_metadata(directory: Path, iteration: int | None) -> dict[str, str]:
    """What every file of the export records of its source (safetensors metadata takes strings only): the name of
    the checkpoint's iteration directory in its run folder (``iter_0000100``, ``release``) and its iteration where
    known. Not its path: exports are uploaded to the Hugging Face Hub, and a path names the cluster's project, account
    and user (the printed summary names it in full)."""
    found = {"oellm_source": directory.absolute().name}
    return found if iteration is None else {**found, "oellm_iteration": str(iteration)}
