"""On-disk conversion, streamed one unit at a time: HF safetensors directory <-> megatron-core checkpoint.

Every input is checked against the card before any tensor data is read (names, shapes and dtypes from the
safetensors headers / the checkpoint metadata); the output is written to a temporary sibling directory that is moved
into place at the end and deleted if the conversion fails, so a failed conversion leaves nothing half-written.

Memory: the HF -> megatron direction holds one unit (one decoder layer, or the embedding / head) of converted
tensors plus the source tensors it is built from; megatron -> HF holds one unit plus the HF tensors waiting for the
current output shard (at most ``max_shard_bytes``).

A megatron output directory is what megatron training's ``--load`` reads: ``latest_checkpointed_iteration.txt``
(``release``) and ``release/`` holding the distributed checkpoint, whose common state carries the card
(``oellm_card``) next to ``checkpoint_version`` and ``iteration``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.dist_ckpt import CheckpointReader, save_streaming
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import (
    Unit,
    expected_shapes,
    family_module,
    hf_to_mcore_unit,
    iter_hf_to_mcore,
    mcore_to_hf_unit,
    unit_shapes,
    units,
)
from megatron.oellm.convert.hf_names import CanonicalView, canonical_hf_names
from megatron.oellm.convert.safetensors_io import DEFAULT_MAX_SHARD_BYTES, SafetensorsSource, ShardedSafetensorsWriter
from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS, stored_padded_vocab, strip_vocab_rows

ITERATION_FILE = "latest_checkpointed_iteration.txt"
RELEASE = "release"
CARD_KEY = "oellm_card"
CHECKPOINT_VERSION = 3.0
"""megatron training's current checkpoint version (``set_checkpoint_version``)."""
STRUCTURAL_FIELDS = ("family", "num_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_query_groups",
                     "kv_channels", "qk_layernorm", "attention_output_gate", "num_experts", "moe_ffn_hidden_size",
                     "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "linear_mixer",
                     "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "zero_centered_norm",
                     "untie_embeddings")
"""Card fields that decide tensor names, shapes or values; a checkpoint made for another card must match them."""
_HF_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                   "head_dim", "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
                   "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                   "linear_conv_kernel_dim", "layer_types", "tie_word_embeddings", "num_experts_per_tok",
                   "norm_topk_prob", "rms_norm_eps")
_WEIGHT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
_MODEL_KEY_PREFIXES = ("embedding.", "decoder.", "output_layer.")
"""Checkpoint keys of the language model's own tensors (optimizer state, RNG and MTP keys start otherwise)."""
_ROUTER_BUFFERS = (".router.expert_bias", ".router.qb_beta")
"""Persistent buffers of megatron-core 0.19.2's router (expert-bias and quantile balancing): routing state that a
Hugging Face Qwen model has no tensor for."""
_FUSED_EXPERTS = re.compile(r"^(.*\.mlp\.experts\.)(gate_up_proj|down_proj)$")


@dataclass(frozen=True)
class ConversionSummary:
    """What a conversion did, for the command's report."""

    output: Path
    tensors_read: int
    tensors_written: int
    skipped: list[str]
    padding_rows: int = 0
    """Vocabulary rows megatron padded past the card's vocabulary, dropped by mcore-to-hf (per vocabulary tensor)."""


def card_record(card: ModelCard) -> dict:
    """The card as stored with megatron weights (every field except the free-text ``sources``)."""
    return {k: v for k, v in dataclasses.asdict(card).items() if k != "sources"}


def check_hf_config(card: ModelCard, hf_dir: Path) -> None:
    """Compare the checkpoint's ``config.json`` (``text_config`` if nested) with the card's HF config."""
    path = hf_dir / "config.json"
    if not path.is_file():
        return
    try:
        stored = json.loads(path.read_text())
    except ValueError as error:
        raise ConversionError(f"{path} is not valid JSON: {error}") from error
    stored = stored.get("text_config", stored)
    expected = family_module(card).hf_config_from_card(card).to_dict()
    wrong = [f"{k}: checkpoint {stored[k]!r}, card {expected[k]!r}" for k in _HF_CONFIG_KEYS
             if k in stored and k in expected and stored[k] != expected[k]]
    if wrong:
        raise ConversionError(f"{path} does not describe card {card.name}: {'; '.join(wrong)}; "
                              "pick the card of this checkpoint with --model")


def check_hf_tensors(card: ModelCard,
                     tensors: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, torch.dtype]:
    """Raise naming the first missing, unexpected, mis-shaped or not floating-point tensor of ``tensors`` (name ->
    (shape, dtype)); fused expert tensors count per expert. Returns the dtype of every tensor, experts per expert."""
    expected = expected_shapes(card)[0]
    covered = {}
    for name, (shape, dtype) in tensors.items():
        fused = _FUSED_EXPERTS.match(name)
        if not fused:
            covered[name] = (shape, dtype)
            continue
        prefix, kind = fused[1], fused[2]
        e, f, h = card.num_experts, card.moe_ffn_hidden_size, card.hidden_size
        want = (e, 2 * f, h) if kind == "gate_up_proj" else (e, h, f)
        if shape != want:
            raise ConversionError(f"tensor {name!r} has shape {list(shape)}, card {card.name} expects {list(want)}")
        parts = ("gate_proj", "up_proj") if kind == "gate_up_proj" else ("down_proj",)
        for i in range(e):
            for part in parts:
                covered[f"{prefix}{i}.{part}.weight"] = (expected.get(f"{prefix}{i}.{part}.weight"), dtype)
    missing = [n for n in expected if n not in covered]
    if missing:
        raise ConversionError(f"missing tensor {missing[0]!r} ({len(missing)} missing) for card {card.name}")
    unexpected = [n for n in covered if n not in expected]
    if unexpected:
        raise ConversionError(f"unexpected tensor {unexpected[0]!r} ({len(unexpected)} unexpected) for card "
                              f"{card.name}; is --model the right card?")
    for name, (shape, dtype) in covered.items():
        if tuple(shape) != expected[name]:
            raise ConversionError(f"tensor {name!r} has shape {list(shape)}, card {card.name} expects "
                                  f"{list(expected[name])}")
        if dtype not in _WEIGHT_DTYPES:
            raise ConversionError(f"tensor {name!r} has dtype {dtype}; weights must be one of "
                                  f"{', '.join(map(str, _WEIGHT_DTYPES))}")
    return {name: dtype for name, (_, dtype) in covered.items()}


def check_round_trip_dtypes(card: ModelCard, unit: Unit, mcore: Mapping[str, Tensor],
                            hf_dtypes: Mapping[str, torch.dtype]) -> None:
    """Raise if an HF tensor of ``unit`` would come back from its megatron tensors ``mcore`` (``meta`` is enough) in
    another dtype, i.e. megatron fuses it with a tensor of another dtype (``torch.cat`` promotes)."""
    for name, tensor in mcore_to_hf_unit(card, unit, mcore).items():
        if tensor.dtype != hf_dtypes[name]:
            raise ConversionError(f"tensor {name!r} is {hf_dtypes[name]} but megatron fuses it with tensors of "
                                  f"another dtype into one {tensor.dtype} tensor; save the checkpoint in one dtype")


@contextmanager
def _staged_output(out_dir: Path, overwrite: bool, source: Path) -> Iterator[Path]:
    """A fresh temporary directory beside ``out_dir`` to write into: moved to ``out_dir`` (replacing it) when the
    block succeeds, deleted when it fails. Refuses a non-empty ``out_dir`` unless ``overwrite``, and one that is or
    holds ``source``."""
    out_dir, source = out_dir.resolve(), source.resolve()
    if source.is_relative_to(out_dir):
        raise ConversionError(f"output {out_dir} would overwrite the input {source}; choose another --out")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise ConversionError(f"output {out_dir} exists and is not empty; pass --overwrite to replace it")
    staging = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _commit_output(staging, out_dir)


def _commit_output(staging: Path, out_dir: Path) -> None:
    """Move the finished ``staging`` directory to ``out_dir``: its entries into an empty existing directory (which
    stays the same directory, e.g. a shell's current one), otherwise in place of ``out_dir``."""
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        for entry in staging.iterdir():
            entry.rename(out_dir / entry.name)
        staging.rmdir()
        return
    if out_dir.is_dir():
        shutil.rmtree(out_dir)
    elif out_dir.exists():
        out_dir.unlink()
    staging.rename(out_dir)


def hf_to_mcore_checkpoint(card: ModelCard, hf_dir: Path, out_dir: Path, overwrite: bool = False) -> ConversionSummary:
    """Convert the HF checkpoint ``hf_dir`` to a megatron-core checkpoint in ``out_dir`` (see module doc)."""
    module = family_module(card)
    source = SafetensorsSource(hf_dir)
    header = source.shapes()
    names, skipped = canonical_hf_names(header)
    check_hf_config(card, hf_dir)
    dtypes = check_hf_tensors(card, {canonical: header[stored] for canonical, stored in names.items()})
    meta = {name: torch.empty(shape, dtype=dtype, device="meta") for name, (shape, dtype) in header.items()}
    chunks, unit_of = [], {}
    for unit, tensors in iter_hf_to_mcore(card, meta):
        check_round_trip_dtypes(card, unit, tensors, dtypes)
        for name, tensor in tensors.items():
            unit_of[name] = unit
            chunks += [(p, tensor.dtype) for p in mcore_layout.pieces(card, module.MCORE_MODEL, name,
                                                                         tuple(tensor.shape))]
    view = CanonicalView(source)
    common = {"checkpoint_version": CHECKPOINT_VERSION, "iteration": 0, CARD_KEY: card_record(card)}
    with _staged_output(out_dir, overwrite, hf_dir) as staging:
        save_streaming(staging / RELEASE, chunks, unit_of, lambda unit: hf_to_mcore_unit(card, unit, view), common)
        (staging / ITERATION_FILE).write_text(RELEASE + "\n")
    return ConversionSummary(out_dir, len(names), len(unit_of), skipped)


def resolve_mcore_dir(path: Path) -> Path:
    """The distributed-checkpoint directory of ``path``: itself, or the iteration named by its
    ``latest_checkpointed_iteration.txt`` (``release`` or ``iter_XXXXXXX``)."""
    if not path.is_dir():
        raise ConversionError(f"{path} is not a directory; pass a megatron checkpoint directory")
    marker = path / ITERATION_FILE
    if marker.is_file():
        value = marker.read_text().strip()
        if value != RELEASE and not value.isdigit():
            raise ConversionError(f"{marker} holds {value!r}, not {RELEASE!r} or an iteration number; pass the "
                                  "iteration directory itself with --mcore")
        return path / (RELEASE if value == RELEASE else f"iter_{int(value):07d}")
    return path


def check_stored_card(card: ModelCard, common: dict) -> None:
    """If the checkpoint records its card, its structural fields must match ``card``."""
    stored = common.get(CARD_KEY)
    if not stored:
        return
    wrong = [f"{k}: checkpoint {stored[k]!r}, card {getattr(card, k)!r}" for k in STRUCTURAL_FIELDS
             if k in stored and stored[k] != getattr(card, k)]
    if wrong:
        raise ConversionError(f"checkpoint was written for card {stored.get('name')!r}, not {card.name}: "
                              f"{'; '.join(wrong)}")


def mcore_to_hf_checkpoint(card: ModelCard, mcore_dir: Path, out_dir: Path, overwrite: bool = False,
                           max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> ConversionSummary:
    """Convert the megatron-core checkpoint ``mcore_dir`` to an HF safetensors checkpoint in ``out_dir``; vocabulary
    rows megatron padded past the card's vocabulary are dropped."""
    module = family_module(card)
    reader = CheckpointReader(resolve_mcore_dir(mcore_dir))
    stored = reader.tensor_shapes()
    common = reader.common_state()
    check_stored_card(card, common)
    padded = stored_padded_vocab(card.vocab_size, {n: stored[n][0][0] for n in VOCAB_TENSORS if n in stored},
                                 common.get("args"))
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
    with _staged_output(out_dir, overwrite, reader.directory) as staging:
        writer = ShardedSafetensorsWriter(staging, max_shard_bytes)
        written = 0
        for unit, pieces in zip(units(card), unit_pieces, strict=True):
            tensors: dict[str, Tensor] = mcore_to_hf_unit(card, unit, strip_vocab_rows(reader.read(pieces),
                                                                                       card.vocab_size))
            writer.add(tensors)
            written += len(tensors)
        writer.close()
        module.hf_config_from_card(card).save_pretrained(staging)
    return ConversionSummary(out_dir, sum(len({p.name for p in ps}) for ps in unit_pieces), written, [],
                             padded - card.vocab_size)
