"""What a megatron checkpoint directory of a conversion holds, and how ``--mcore`` is found in one.

A megatron output directory is what megatron training's ``--load`` reads: ``latest_checkpointed_iteration.txt``
(``release``) and ``release/`` holding the distributed checkpoint, whose common state carries the card
(``oellm_card``) and the source's ``config.json`` / ``generation_config.json`` texts (``oellm_hf_config``) next to
``checkpoint_version``, ``iteration`` and the run arguments megatron's loader reads (``args``,
:func:`megatron_checkpoint_args`); ``mcore-to-hf`` writes those texts back unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.dist_ckpt import CHECKPOINT_CONFIG_FILE, METADATA_FILE
from megatron.oellm.convert.errors import ConversionError, check_folder_access, listed
from megatron.oellm.convert.hf_config import CONFIG_NAME
from megatron.oellm.convert.output import partial_output_of
from megatron.oellm.megatron_args import model_flags

ITERATION_FILE = "latest_checkpointed_iteration.txt"
RELEASE = "release"
ITERATION_PREFIX = "iter_"


def is_hugging_face_model(directory: Path) -> bool:
    """Whether ``directory`` looks like a Hugging Face model folder (``config.json`` beside ``*.safetensors``
    weights), which megatron-core cannot load: it holds no tracker file and no megatron checkpoint."""
    return (directory / CONFIG_NAME).is_file() and next(directory.glob("*.safetensors"), None) is not None


def iteration_directory_name(iteration: int) -> str:
    """The name megatron gives the directory of checkpoint ``iteration`` (``iter_0000042``)."""
    return f"{ITERATION_PREFIX}{iteration:07d}"


def tracked_directory_name(value: str) -> str | None:
    """The iteration directory a ``latest_checkpointed_iteration.txt`` holding ``value`` (stripped) names:
    ``release`` or ``iter_XXXXXXX``; None for any other content, which megatron-core cannot read either."""
    if value == RELEASE:
        return RELEASE
    return iteration_directory_name(int(value)) if value.isdigit() else None


def iteration_of(name: str) -> int | None:
    """The iteration an ``iter_XXXXXXX`` directory name holds, None for any other name."""
    number = name.removeprefix(ITERATION_PREFIX)
    return int(number) if name.startswith(ITERATION_PREFIX) and number.isdigit() else None


def finished_tracked_iteration(directory: Path) -> Path | None:
    """The iteration directory the ``latest_checkpointed_iteration.txt`` beside ``directory`` (in its run folder)
    names, when that is another directory holding a finished ``torch_dist`` save (its ``metadata.json``): what to
    load or convert in place of an unfinished save in ``directory``. None when there is no such tracker, it cannot be
    read, or it names ``directory`` or an unfinished save."""
    try:
        value = (directory.parent / ITERATION_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    name = tracked_directory_name(value)
    if name is None:
        return None
    tracked = directory.parent / name
    if tracked.name == directory.name or not (tracked / CHECKPOINT_CONFIG_FILE).is_file():
        return None
    return tracked


CARD_KEY = "oellm_card"
HF_CONFIG_KEY = "oellm_hf_config"
"""Common-state entry holding the source's HF config files: file name -> text, as read."""
CHECKPOINT_VERSION = 3.0
"""megatron training's current checkpoint version (``set_checkpoint_version``)."""


def stored_card_name(common: dict) -> str | None:
    """The card a checkpoint's common state ``common`` names: the one hf-to-mcore recorded (:data:`CARD_KEY`), else
    the ``--oellm-model`` of the training run that saved it (its stored ``args``); None if it names none."""
    record = common.get(CARD_KEY)
    name = record.get("name") if isinstance(record, dict) else getattr(common.get("args"), "oellm_model", None)
    return name if isinstance(name, str) and name else None


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


def _refuse_wrong_level(path: Path) -> None:
    """Raise if ``path`` (``--mcore``, without ``latest_checkpointed_iteration.txt``) is no checkpoint but a Hugging
    Face model (the directions swapped) or holds checkpoints up to two levels below (given one level too high: the
    folder of the runs, or a run whose ``latest_checkpointed_iteration.txt`` is missing), naming them."""
    if (path / METADATA_FILE).is_file():
        return
    if is_hugging_face_model(path):
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
    ``latest_checkpointed_iteration.txt`` (``release`` or ``iter_XXXXXXX``); either must be a folder this user may
    enter (:func:`check_folder_access`)."""
    _refuse_partial_output(path)
    check_folder_access(path, f"--mcore {path}")
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
    name = tracked_directory_name(value)
    if name is None:
        raise ConversionError(f"{marker} holds {value!r}, not {RELEASE!r} or an iteration number; pass the "
                              "iteration directory itself with --mcore")
    iteration = path / name
    if not iteration.is_dir():
        present = sorted(entry.name for entry in path.iterdir()
                         if entry.is_dir() and (entry.name == RELEASE or entry.name.startswith(ITERATION_PREFIX)))
        raise ConversionError(f"{marker} names {value}, but {iteration} is missing (present: "
                              f"{', '.join(present) or 'none'}); pass the iteration directory itself with --mcore")
    check_folder_access(iteration, f"{iteration} (the checkpoint {marker} names)")
    return iteration
