"""The common state of the checkpoint a run will load, read before Megatron initialises, and the megatron-oellm run
arguments it stores: the one reader behind the entry's checkpoint checks (:func:`megatron.oellm.training.entry.
check_checkpoint_architecture`, :func:`megatron.oellm.training.checkpoint_layout.check_optimizer_resharding`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def read_common_state(load_dir: Path, ckpt_step: int | None = None) -> tuple[Path, dict] | None:
    """(iteration directory, common state) of the distributed checkpoint megatron loads from ``load_dir``:
    ``ckpt_step``'s iteration, else the one its ``latest_checkpointed_iteration.txt`` names (``release`` included),
    else ``load_dir`` itself. None when it cannot be read (a ``--ckpt-format torch`` one among them): megatron's loader
    reports those."""
    from megatron.oellm.convert.dist_ckpt import CheckpointReader
    from megatron.oellm.convert.errors import ConversionError
    from megatron.oellm.convert.pipeline import resolve_mcore_dir

    try:
        directory = load_dir / f"iter_{ckpt_step:07d}" if ckpt_step else resolve_mcore_dir(load_dir)
        common = CheckpointReader(directory).common_state()
    except (OSError, UnicodeDecodeError, ConversionError):
        return None
    return (directory, common) if isinstance(common, dict) else None


def oellm_run_args(common: dict) -> tuple[argparse.Namespace, str | None] | None:
    """(run arguments, card name) a checkpoint's ``common`` state stores if megatron-oellm wrote it: an ``oellm
    convert hf-to-mcore`` checkpoint (it records its card) or one the training entry saved (its arguments hold
    ``oellm_model``). None for any other checkpoint or one without stored arguments."""
    from megatron.oellm.convert.pipeline import CARD_KEY

    stored = common.get("args")
    if not isinstance(stored, argparse.Namespace):
        return None
    if isinstance(common.get(CARD_KEY), dict):
        return stored, common[CARD_KEY].get("name")
    return (stored, stored.oellm_model) if hasattr(stored, "oellm_model") else None
