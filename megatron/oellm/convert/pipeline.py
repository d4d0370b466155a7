"""On-disk conversion, streamed one unit at a time: HF safetensors directory <-> megatron-core checkpoint.

Every input is checked against the card before any tensor data is read (names, shapes and dtypes from the
safetensors headers / the checkpoint metadata, the HF ``config.json``); the output is written to a temporary sibling
directory that is moved into place at the end and deleted if the conversion fails or is stopped, so a failed
conversion leaves nothing half-written (:mod:`megatron.oellm.convert.output` has the rules for ``--out``).

Memory: the HF -> megatron direction holds one unit (one decoder layer, or the embedding / head) of converted
tensors plus the source tensors it is built from; megatron -> HF holds one unit as read and writes each HF tensor
straight into its shard file (the shards' layout is planned on ``meta`` tensors first), whatever the shard size.

A megatron output directory is what megatron training's ``--load`` reads: ``latest_checkpointed_iteration.txt``
(``release``) and ``release/`` holding the distributed checkpoint, whose common state carries the card
(``oellm_card``) and the source's ``config.json`` / ``generation_config.json`` texts (``oellm_hf_config``) next to
``checkpoint_version``, ``iteration`` and the run arguments megatron's loader reads (``args``,
:func:`megatron_checkpoint_args`); ``mcore-to-hf`` writes those texts back unchanged, and with ``--tokenizer`` the
tokenizer files of that folder (:mod:`megatron.oellm.convert.tokenizer_files`).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.dist_ckpt import CHECKPOINT_CONFIG_FILE, METADATA_FILE, CheckpointReader, save_streaming
from megatron.oellm.convert.errors import ConversionError, listed
from megatron.oellm.convert.family import (
    Unit,
    family_module,
    hf_to_mcore_unit,
    iter_hf_to_mcore,
    iter_mcore_to_hf,
    mcore_to_hf_unit,
    unit_shapes,
    units,
)
from megatron.oellm.convert.hf_config import (
    CONFIG_FILES,
    CONFIG_NAME,
    CardContradiction,
    check_hf_config,
    parse_json_object,
    read_config_files,
    text_model_config,
)
from megatron.oellm.convert.hf_names import CanonicalView, canonical_hf_names
from megatron.oellm.convert.output import (
    TerminationGuard,
    check_not_input,
    leftover_staging_note,
    partial_output_of,
    resolved_out,
    staged_output,
)
from megatron.oellm.convert.safetensors_io import (
    DEFAULT_MAX_SHARD_BYTES,
    INDEX_NAME,
    SINGLE_NAME,
    Layout,
    SafetensorsSource,
    ShardedSafetensorsWriter,
    carries_export_mark,
    is_written_name,
    layout_of,
    tensor_nbytes,
)
from megatron.oellm.convert.tensor_checks import check_hf_tensors, check_one_dtype_per_key, warn_non_finite
from megatron.oellm.convert.tokenizer_files import (
    check_tokenizer_dir,
    copy_tokenizer_files,
    foreign_in_tokenizer_entry,
)
from megatron.oellm.convert.vocab_padding import (
    HF_VOCAB_TENSORS,
    VOCAB_TENSORS,
    stored_padded_vocab,
    strip_vocab_rows,
)
from megatron.oellm.megatron_args import model_flags
from megatron.oellm.training.card_from_args import CARD_SCOPE, inexpressible_flags

ITERATION_FILE = "latest_checkpointed_iteration.txt"
RELEASE = "release"
ITERATION_PREFIX = "iter_"


def iteration_directory_name(iteration: int) -> str:
    """The name megatron gives the directory of checkpoint ``iteration`` (``iter_0000042``)."""
    return f"{ITERATION_PREFIX}{iteration:07d}"


def iteration_of(name: str) -> int | None:
    """The iteration an ``iter_XXXXXXX`` directory name holds, None for any other name."""
    number = name.removeprefix(ITERATION_PREFIX)
    return int(number) if name.startswith(ITERATION_PREFIX) and number.isdigit() else None


CARD_KEY = "oellm_card"
HF_CONFIG_KEY = "oellm_hf_config"
"""Common-state entry holding the source's HF config files: file name -> text, as read."""
CHECKPOINT_VERSION = 3.0
"""megatron training's current checkpoint version (``set_checkpoint_version``)."""
STRUCTURAL_FIELDS = ("family", "num_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_query_groups",
                     "kv_channels", "qk_layernorm", "attention_output_gate", "num_experts", "moe_ffn_hidden_size",
                     "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "linear_mixer",
                     "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "zero_centered_norm",
                     "untie_embeddings")
"""Card fields that decide tensor names, shapes or values; a checkpoint made for another card must match them."""
RUN_FLAGS_NO_SHAPE_SHOWS = ("rotary-base", "rotary-percent", "norm-epsilon", "apply-layernorm-1p", "moe-router-topk",
                            "moe-router-pre-softmax")
"""Megatron flags of :func:`megatron_args.model_flags` that change what the model computes but no tensor's name or
shape: RoPE base and rotated fraction, norm epsilon and zero-centring, router top-k and its renormalisation."""
INTERLEAVED_GLU_ARGS = (("moe_mlp_glu_interleave_size", "num_experts", None),
                        ("moe_shared_expert_glu_interleave_size", "moe_shared_expert_intermediate_size",
                         "use_grouped_gemm_for_shared_expert"))
"""(run argument, card field, run argument it needs) under which megatron-core 0.19.2 keeps a SwiGLU fc1 weight with
gate and up rows alternating in blocks of that size within each tensor-parallel shard, and saves it so: the routed
experts' (TE's grouped experts), and the shared expert's where ``use_grouped_gemm_for_shared_expert`` builds it
from TE's fused ops. The converter reads fc1 as ``[gate; up]``."""
_MODEL_KEY_PREFIXES = ("embedding.", "decoder.", "output_layer.")
"""Checkpoint keys of the language model's own tensors (optimizer state, RNG and MTP keys start otherwise)."""
MTP_KEY_PREFIX = "mtp."
"""Checkpoint keys of megatron-core's multi-token-prediction block (``--mtp-num-layers``): a head the Hugging Face
causal-LM model has no tensors for, so mcore-to-hf leaves them out and lists them in its report."""
_ROUTER_BUFFERS = (".router.expert_bias", ".router.qb_beta")
"""Persistent buffers of megatron-core 0.19.2's router (expert-bias and quantile balancing): routing state that a
Hugging Face Qwen model has no tensor for."""
_DCP_DATA_FILE = re.compile(r"__\d+_\d+\.distcp")
"""A data file of PyTorch DCP's file-system writer (``__<rank>_<n>.distcp``)."""


@dataclass(frozen=True)
class ConversionSummary:
    """What a conversion did, for the command's report."""

    output: Path
    tensors_read: int
    tensors_written: int
    skipped: list[str]
    """Source tensors left out: a published HF checkpoint's vision tower and MTP head (hf-to-mcore), a megatron
    checkpoint's multi-token-prediction block (mcore-to-hf)."""
    padding_rows: int = 0
    """Vocabulary rows megatron padded past the card's vocabulary, dropped by mcore-to-hf (per vocabulary tensor)."""
    notes: list[str] = field(default_factory=list)
    """Lines for the report: where the HF config came from or went, or that there was none."""


def _is_checkpoint_file(name: str) -> bool:
    """Whether ``name`` is a file :func:`save_streaming` writes into ``release/``."""
    return name in (METADATA_FILE, CHECKPOINT_CONFIG_FILE) or _DCP_DATA_FILE.fullmatch(name) is not None


def _foreign_in_mcore_output(entry: Path) -> list[str]:
    """What ``entry`` of ``--out`` holds that hf-to-mcore does not write (see :data:`output.Foreign`): anything but
    the iteration file and a ``release/`` directory of checkpoint files (a user's notes or a checkpoint megatron
    training saved there would be deleted with it)."""
    if entry.name == ITERATION_FILE and entry.is_file():
        return []
    if entry.name == RELEASE and entry.is_dir() and not entry.is_symlink():
        names = sorted(path.name for path in entry.iterdir())
        return [f"{RELEASE}/{name}" for name in names if not _is_checkpoint_file(name)]
    return [entry.name]


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
        marked = any(carries_export_mark(entry.parent / name) for name in (SINGLE_NAME, INDEX_NAME))
        return [] if marked else [f"{entry.name} (no marked {SINGLE_NAME} or {INDEX_NAME} beside it)"]
    return [entry.name]


def _refuse_unmarked_model(out_dir: Path) -> None:
    """Raise if ``--out`` holds model files (the names mcore-to-hf writes) without its mark, with or without
    ``--overwrite``: another model's files (the export's source, a download), or an export of megatron-oellm 0.1.0 or
    earlier, written before the mark. Either way the conversion must not replace them, and the refusal says why
    rather than that they are files "this conversion does not write"."""
    try:
        unmarked = sorted(entry.name for entry in out_dir.iterdir()  # links are named as such by the output check
                          if is_written_name(entry.name) and not entry.is_symlink() and not carries_export_mark(entry))
    except OSError:  # not a directory, or unreadable: the output checks name it
        return
    if unmarked:
        raise ConversionError(f"output {out_dir} holds a model ({listed(unmarked, 3)}) without the oellm_export mark "
                              "that mcore-to-hf writes into its files: another model's (the export's source? a "
                              "download?), or an export of megatron-oellm 0.1.0 or earlier, which had no mark; "
                              "--overwrite replaces only marked exports: choose another --out, or delete an old "
                              "export yourself")


def _foreign_in_hf_output_with_tokenizer(entry: Path) -> list[str]:
    """:func:`_foreign_in_hf_output` for an export given ``--tokenizer``, which writes the tokenizer files too: a
    previous export's tokenizer files are replaced by the new ones."""
    return _foreign_in_hf_output(entry) and foreign_in_tokenizer_entry(entry)


def card_record(card: ModelCard) -> dict:
    """The card as stored with megatron weights (every field except the free-text ``sources``)."""
    return {k: v for k, v in dataclasses.asdict(card).items() if k != "sources"}


def megatron_checkpoint_args(card: ModelCard) -> argparse.Namespace:
    """The ``args`` entry of the checkpoint's common state: the few run arguments megatron training reads from a
    checkpoint it loads, as the training entry derives them from ``card`` (:func:`megatron_args.model_flags`).

    megatron-core 0.19.2's ``load_checkpoint`` takes a ``torch_dist`` checkpoint whose ``args`` name no
    ``hybrid_layer_pattern`` for a GPTModel's and, loading it into a HybridModel, tries to translate GPT layers
    (failing on GDN ``G`` layers); with ``args`` present it also compares ``num_layers``, ``hidden_size`` and
    ``num_attention_heads`` with the run's (``check_checkpoint_args``), so those are stored too.
    """
    flags = model_flags(card)
    fields = {"num_layers": flags["num-layers"], "hidden_size": flags["hidden-size"],
              "num_attention_heads": flags["num-attention-heads"]}
    if flags.get("hybrid-layer-pattern"):
        fields["hybrid_layer_pattern"] = flags["hybrid-layer-pattern"]
    return argparse.Namespace(**fields)


def _bytes_of(pieces: Iterable[tuple[mcore_layout.Piece, torch.dtype]]) -> int:
    """Bytes of the tensor data in ``pieces`` (each with its dtype): what the output needs on disk, give or take the
    format's metadata."""
    return sum(tensor_nbytes(piece.chunk_shape, dtype) for piece, dtype in pieces)


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


def hf_to_mcore_checkpoint(card: ModelCard, hf_dir: Path, out_dir: Path, overwrite: bool = False) -> ConversionSummary:
    """Convert the HF checkpoint ``hf_dir`` to a megatron-core checkpoint in ``out_dir`` (see module doc). SIGTERM /
    SIGHUP / SIGINT at any point end it with :class:`ConversionInterrupted`, also during the checks (seconds at 235B
    scale); the summary names ``out_dir`` as an absolute path."""
    with TerminationGuard() as guard:
        return _hf_to_mcore(card, hf_dir, resolved_out(out_dir), overwrite, guard)


def _hf_to_mcore(card: ModelCard, hf_dir: Path, out_dir: Path, overwrite: bool,
                 guard: TerminationGuard) -> ConversionSummary:
    """:func:`hf_to_mcore_checkpoint` within its termination guard, ``out_dir`` resolved."""
    module = family_module(card)
    _refuse_megatron_checkpoint(hf_dir)
    source = SafetensorsSource(hf_dir)
    header = source.shapes()
    names, skipped = canonical_hf_names(header)
    config_files = read_config_files(hf_dir)
    tensors = {canonical: header[stored] for canonical, stored in names.items()}
    if CONFIG_NAME in config_files:
        _check_config_of_weights(card, config_files[CONFIG_NAME], str(hf_dir / CONFIG_NAME), tensors)
    check_hf_tensors(card, tensors)
    meta = {name: torch.empty(shape, dtype=dtype, device="meta") for name, (shape, dtype) in header.items()}
    chunks, unit_of = [], {}
    for unit, tensors in iter_hf_to_mcore(card, meta):
        for name, tensor in tensors.items():
            unit_of[name] = unit
            chunks += [(p, tensor.dtype) for p in mcore_layout.pieces(card, module.MCORE_MODEL, name,
                                                                         tuple(tensor.shape))]
    check_one_dtype_per_key(chunks)
    check_not_input(out_dir, [hf_dir, *source.input_files(), *(hf_dir / name for name in config_files)])
    view = CanonicalView(source)
    common = {"checkpoint_version": CHECKPOINT_VERSION, "iteration": 0, "args": megatron_checkpoint_args(card),
              CARD_KEY: card_record(card), HF_CONFIG_KEY: config_files}
    with staged_output(out_dir, overwrite, _foreign_in_mcore_output, _bytes_of(chunks), guard) as staging:
        save_streaming(staging / RELEASE, chunks, unit_of, lambda unit: _import_unit(card, unit, view, source), common)
        (staging / ITERATION_FILE).write_text(RELEASE + "\n")
    notes = _kept_config_notes(hf_dir, config_files) + _leftover_notes(out_dir)
    return ConversionSummary(out_dir, len(names), len(unit_of), skipped, notes=notes)


def _import_unit(card: ModelCard, unit: Unit, view: CanonicalView,
                 source: SafetensorsSource) -> dict[str, torch.Tensor]:
    """The megatron tensors of one unit from ``view`` (of ``source``), whose files are closed afterwards so that
    the pages read for this unit leave resident memory once its tensors are written (see
    :meth:`SafetensorsSource.close_files`); NaN and infinity are named (:func:`warn_non_finite`)."""
    tensors = hf_to_mcore_unit(card, unit, view)
    source.close_files()
    warn_non_finite(tensors)
    return tensors


def _leftover_notes(out_dir: Path) -> list[str]:
    """A report line naming partial outputs that killed conversions into ``out_dir`` left beside it, if any."""
    note = leftover_staging_note(out_dir)
    return [note] if note else []


def _kept_config_notes(hf_dir: Path, files: dict[str, str]) -> list[str]:
    """Report lines on the HF config files (``files``, read from ``hf_dir``) hf-to-mcore keeps with the checkpoint."""
    notes = [f"kept {' and '.join(files)} with the checkpoint for mcore-to-hf"] if files else []
    if CONFIG_NAME not in files:
        notes.append(f"no {CONFIG_NAME} in {hf_dir}: checked against the card by tensor shapes only; mcore-to-hf "
                     "will write the card's config")
    return notes


def _refuse_wrong_level(path: Path) -> None:
    """Raise if ``path`` (``--mcore``, without ``latest_checkpointed_iteration.txt``) is no checkpoint but a Hugging
    Face model (the directions swapped) or holds checkpoints up to two levels below (given one level too high: the
    folder of the runs, or a run whose ``latest_checkpointed_iteration.txt`` is missing), naming them."""
    if (path / METADATA_FILE).is_file():
        return
    if (path / CONFIG_NAME).is_file() and next(path.glob("*.safetensors"), None) is not None:
        raise ConversionError(f"--mcore {path} is a Hugging Face model, not a megatron checkpoint; convert it with "
                              f"`oellm convert hf-to-mcore --hf {path}`")
    found = sorted({marker.parent for pattern in ("*/", "*/*/") for name in (ITERATION_FILE, METADATA_FILE)
                    for marker in path.glob(pattern + name) if marker.is_file()})
    found = [p for p in found if p.parent not in found]  # a run, not also its iterations
    if found:
        raise ConversionError(f"{path} is not a megatron-core distributed checkpoint (no {METADATA_FILE} or "
                              f"{ITERATION_FILE}); pass one of the checkpoints in it with --mcore: {listed(found, 3)}")


def _refuse_partial_output(path: Path) -> None:
    """Raise if ``path`` (``--mcore``) is or lies in the staging directory a stopped conversion left (see
    :func:`partial_output_of`): named as such, not as a folder without ``.metadata``."""
    partial = partial_output_of(path)
    if partial is not None:
        staging, out, pid = partial
        raise ConversionError(f"--mcore {path} is the partial output of a conversion into {out} that was stopped "
                              f"(or is still running, as process {pid}), not a checkpoint; remove {staging} unless "
                              "that conversion is still running, and convert a finished checkpoint")


def resolve_mcore_dir(path: Path) -> Path:
    """The distributed-checkpoint directory of ``path``: itself, or the iteration named by its
    ``latest_checkpointed_iteration.txt`` (``release`` or ``iter_XXXXXXX``)."""
    _refuse_partial_output(path)
    if not path.is_dir():
        raise ConversionError(f"{path} is not a directory; pass a megatron checkpoint directory")
    marker = path / ITERATION_FILE
    if not marker.is_file():
        _refuse_wrong_level(path)
        return path
    try:
        value = marker.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ConversionError(f"cannot read {marker}: {error}; pass the iteration directory itself with --mcore"
                              ) from error
    if value != RELEASE and not value.isdigit():
        raise ConversionError(f"{marker} holds {value!r}, not {RELEASE!r} or an iteration number; pass the "
                              "iteration directory itself with --mcore")
    iteration = path / (RELEASE if value == RELEASE else iteration_directory_name(int(value)))
    if not iteration.is_dir():
        present = sorted(entry.name for entry in path.iterdir()
                         if entry.is_dir() and (entry.name == RELEASE or entry.name.startswith(ITERATION_PREFIX)))
        raise ConversionError(f"{marker} names {value}, but {iteration} is missing (present: "
                              f"{', '.join(present) or 'none'}); pass the iteration directory itself with --mcore")
    return iteration


def check_stored_card(card: ModelCard, common: dict) -> None:
    """If the checkpoint records its card, its structural fields must match ``card``.

    The message names the stored card only when it is another card: a checkpoint written for this card with
    another vocabulary (``with_vocab``, as the recipes' ``--vocab-size`` makes it) keeps the card's name.
    """
    stored = common.get(CARD_KEY)
    if not stored:
        return
    differ = [k for k in STRUCTURAL_FIELDS if k in stored and stored[k] != getattr(card, k)]
    if not differ:
        return
    hint = (f"; pass --vocab-size {stored['vocab_size']} for the vocabulary it was written with"
            if differ == ["vocab_size"] else "")
    wrong = "; ".join(f"{k}: checkpoint {stored[k]!r}, card {getattr(card, k)!r}" for k in differ)
    if stored.get("name") != card.name:
        raise ConversionError(f"checkpoint was written for card {stored.get('name')!r}, not {card.name}: {wrong}"
                              f"{hint}")
    if len(differ) == 1:
        k = differ[0]
        raise ConversionError(f"the checkpoint's {k} {stored[k]!r} differs from card {card.name}'s "
                              f"{getattr(card, k)!r}{hint}")
    raise ConversionError(f"the checkpoint was written for another version of card {card.name}: {wrong}{hint}")


def interleaved_glu_flags(card: ModelCard, run_args: object) -> list[str]:
    """``--flag value`` for each of :data:`INTERLEAVED_GLU_ARGS` that ``run_args`` (megatron's arguments, parsed or
    stored) sets for a module ``card`` has: the SwiGLU weights megatron then keeps block-interleaved, where Hugging
    Face models and ``oellm convert`` hold ``[gate; up]``."""
    return [f"--{dest.replace('_', '-')} {getattr(run_args, dest)}"
            for dest, module_size, needs in INTERLEAVED_GLU_ARGS
            if getattr(run_args, dest, None) is not None and getattr(card, module_size)
            and (needs is None or getattr(run_args, needs, False))]


def check_run_arguments(card: ModelCard, run_args: object) -> None:
    """Raise if the run arguments a training checkpoint stores (megatron's ``args``) give one of
    :data:`RUN_FLAGS_NO_SHAPE_SHOWS` another value than ``card``: the tensors would pass every shape check, and the
    exported ``config.json`` (the card's) would describe a model that computes otherwise than the trained one. A run
    described by megatron's flags alone (no ``--oellm-model``) is free to set them; converted checkpoints store none.
    A run that kept SwiGLU weights block-interleaved (:data:`INTERLEAVED_GLU_ARGS`) is refused too: its checkpoint
    holds them in that order. So is a run with a flag no card describes (a sigmoid router, scaled routing weights,
    interleaved RoPE, ...: :func:`inexpressible_flags`), as Megatron's own training scripts can save one; its
    multi-token-prediction head passes, as the export drops it."""
    inexpressible = inexpressible_flags(run_args, allow_mtp=True)
    if inexpressible:
        raise ConversionError(f"the checkpoint's run trained with {'; '.join(inexpressible)}: {CARD_SCOPE}, and the "
                              f"export would describe it as card {card.name}, another model than the one trained")
    interleaved = interleaved_glu_flags(card, run_args)
    if interleaved:
        raise ConversionError(f"the checkpoint's run trained with {' and '.join(interleaved)}: megatron-core keeps and "
                              "saves those SwiGLU weights with gate and up rows alternating in blocks within each "
                              "tensor-parallel shard, while the Hugging Face model takes [gate; up]; oellm convert "
                              "does not reorder them, and the export would mix gate and up rows")
    card_flags = model_flags(card)
    differ = [f"{dest}: run {getattr(run_args, dest)!r}, card {card_flags[flag]!r}"
              for flag in RUN_FLAGS_NO_SHAPE_SHOWS
              for dest in [flag.replace("-", "_")]
              if hasattr(run_args, dest) and getattr(run_args, dest) != card_flags[flag]]
    if differ:
        raise ConversionError(f"the checkpoint's run arguments differ from card {card.name} where no tensor shape "
                              f"shows it: {'; '.join(differ)}; the export would describe another model than the one "
                              "trained: pass the card the run was trained as with --model")


def _stored_config_files(common: dict, directory: Path) -> dict[str, str]:
    """The HF config files hf-to-mcore kept in the checkpoint's common state (file name -> text; empty if none)."""
    files = common.get(HF_CONFIG_KEY)
    if not files:
        return {}
    if not (isinstance(files, dict) and set(files) <= set(CONFIG_FILES)
            and all(isinstance(text, str) for text in files.values())):
        raise ConversionError(f"{directory}: the common state's {HF_CONFIG_KEY!r} is not a map of "
                              f"{' / '.join(CONFIG_FILES)} to their text; the checkpoint is damaged")
    for name, text in files.items():
        parse_json_object(text, f"the {name} stored with {directory}")
    return files


def _export_config_files(card: ModelCard, common: dict, directory: Path,
                         hf_config_dir: Path | None) -> tuple[dict[str, str], str]:
    """The HF config files mcore-to-hf writes as they are (file name -> text; without ``config.json`` the card's
    config is written) and a report line saying where they come from: ``hf_config_dir`` if given, else the checkpoint
    ``directory`` (``common`` is its common state). A ``config.json`` must describe ``card``."""
    if hf_config_dir is not None:
        if not hf_config_dir.is_dir():
            raise ConversionError(f"--hf-config {hf_config_dir} is not a directory")
        files = read_config_files(hf_config_dir)
        if CONFIG_NAME not in files:
            raise ConversionError(f"--hf-config {hf_config_dir} has no {CONFIG_NAME}")
        check_hf_config(card, files[CONFIG_NAME], str(hf_config_dir / CONFIG_NAME),
                        fix="give --hf-config the directory of this checkpoint's own HF model")
        return _text_model_only(card, files, f"{' and '.join(files)} from --hf-config {hf_config_dir}")
    files = _stored_config_files(common, directory)
    if CONFIG_NAME in files:
        check_hf_config(card, files[CONFIG_NAME], f"the {CONFIG_NAME} stored with {directory}")
        return _text_model_only(card, files, f"{' and '.join(files)} as hf-to-mcore kept them with the checkpoint")
    kept = f" ({' and '.join(files)} as kept with the checkpoint)" if files else ""
    return files, (f"{CONFIG_NAME} derived from the card{kept}: the checkpoint holds no HF config.json (e.g. saved "
                   "by training); pass --hf-config DIR of the original model to keep its token ids and settings")


def _text_model_only(card: ModelCard, files: dict[str, str], note: str) -> tuple[dict[str, str], str]:
    """``files`` with a multimodal ``config.json`` replaced by its language model's (:func:`text_model_config`),
    and ``note`` saying so."""
    text = text_model_config(card, files[CONFIG_NAME])
    if text is None:
        return files, note
    return ({**files, CONFIG_NAME: text},
            f"{note}; {CONFIG_NAME} is the text model's part of the multimodal config (the export holds the language "
            "model only)")


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


def _export_unit(card: ModelCard, unit: Unit, reader: CheckpointReader, pieces: list[mcore_layout.Piece],
                 writer: ShardedSafetensorsWriter) -> None:
    """Read one unit's megatron tensors and write its HF tensors with ``writer``. A function of its own so that the unit's read buffers are released when it returns: a loop variable holding them would keep one
    unit alive while the next one is read (twice the largest unit's bytes)."""
    tensors = mcore_to_hf_unit(card, unit, strip_vocab_rows(reader.read(pieces), card.vocab_size))
    warn_non_finite(tensors)
    writer.add(tensors)


def mcore_to_hf_checkpoint(card: ModelCard, mcore_dir: Path, out_dir: Path, overwrite: bool = False,
                           max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, hf_config_dir: Path | None = None,
                           tokenizer_dir: Path | None = None) -> ConversionSummary:
    """Convert the megatron-core checkpoint ``mcore_dir`` to an HF safetensors checkpoint in ``out_dir``; vocabulary
    rows megatron padded past the card's vocabulary are dropped, and so is a multi-token-prediction block
    (:data:`MTP_KEY_PREFIX`, listed in the summary's ``skipped``). ``config.json`` / ``generation_config.json`` are
    those of ``hf_config_dir``, else those stored with the checkpoint, else the card's config. With
    ``tokenizer_dir`` the export also holds that folder's tokenizer files (:mod:`tokenizer_files`), and a previous
    export's tokenizer files in ``out_dir`` are replaced rather than refused as foreign. SIGTERM / SIGHUP / SIGINT at
    any point end it with :class:`ConversionInterrupted`; the summary names ``out_dir`` as an absolute path."""
    with TerminationGuard() as guard:
        return _mcore_to_hf(card, mcore_dir, resolved_out(out_dir), overwrite, max_shard_bytes, hf_config_dir,
                            tokenizer_dir, guard)


def _mcore_to_hf(card: ModelCard, mcore_dir: Path, out_dir: Path, overwrite: bool, max_shard_bytes: int,
                 hf_config_dir: Path | None, tokenizer_dir: Path | None, guard: TerminationGuard) -> ConversionSummary:
    """:func:`mcore_to_hf_checkpoint` within its termination guard, ``out_dir`` resolved."""
    tokenizer_names = check_tokenizer_dir(tokenizer_dir, card.vocab_size) if tokenizer_dir is not None else []
    module = family_module(card)
    reader = CheckpointReader(resolve_mcore_dir(mcore_dir))
    stored = reader.tensor_shapes()
    common = reader.common_state()
    check_stored_card(card, common)
    check_run_arguments(card, common.get("args"))
    config_files, config_note = _export_config_files(card, common, reader.directory, hf_config_dir)
    padded = stored_padded_vocab(card.vocab_size, {n: stored[n][0][0] for n in VOCAB_TENSORS if n in stored},
                                 common.get("args"))
    unit_pieces = _planned_pieces(card, reader, padded)
    config_inputs = [hf_config_dir / name for name in config_files] if hf_config_dir is not None else []
    tokenizer_inputs = [tokenizer_dir / name for name in tokenizer_names] if tokenizer_dir is not None else []
    check_not_input(out_dir, [mcore_dir, reader.directory, *reader.input_files(), *config_inputs, *tokenizer_inputs])
    needed = _bytes_of((piece, stored[piece.key][1]) for pieces in unit_pieces for piece in pieces)
    layout = _hf_layout(card, reader, unit_pieces)
    foreign = _foreign_in_hf_output_with_tokenizer if tokenizer_dir is not None else _foreign_in_hf_output
    _refuse_unmarked_model(out_dir)
    with (staged_output(out_dir, overwrite, foreign, needed, guard) as staging,
          ShardedSafetensorsWriter(staging, layout, max_shard_bytes) as writer):
        if tokenizer_dir is not None:
            copy_tokenizer_files(tokenizer_dir, tokenizer_names, staging)
        for unit, pieces in zip(units(card), unit_pieces, strict=True):
            _export_unit(card, unit, reader, pieces, writer)
        writer.close()  # refuses an export that did not write every tensor of the layout
        for name, text in config_files.items():
            (staging / name).write_bytes(text.encode("utf-8"))
        if CONFIG_NAME not in config_files:
            module.hf_config_from_card(card).save_pretrained(staging)
    tokenizer_note = ([f"copied {len(tokenizer_names)} tokenizer files from --tokenizer {tokenizer_dir}: "
                       f"{', '.join(tokenizer_names)}"] if tokenizer_dir is not None else [])
    return ConversionSummary(out_dir, sum(len({p.name for p in ps}) for ps in unit_pieces), len(layout),
                             sorted(key for key in stored if key.startswith(MTP_KEY_PREFIX)), padded - card.vocab_size,
                             [config_note, *tokenizer_note, *_leftover_notes(out_dir)])
