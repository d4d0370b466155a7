"""Stored-checkpoint stand-ins shared by the checkpoint-loading tests: run arguments and checkpoint directories."""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from megatron.core.dist_checkpointing.core import CheckpointingConfig, save_config

from megatron.oellm.cards import get_card
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv

LAYOUT = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
          "virtual_pipeline_model_parallel_size": None, "expert_model_parallel_size": 2,
          "expert_tensor_parallel_size": 2, "context_parallel_size": 1, "data_parallel_size": 4}
"""A saved run's parallel sizes (validated: ``expert_tensor_parallel_size`` resolved)."""


def stored_args(**sizes) -> argparse.Namespace:
    """The arguments a megatron-oellm training run stores in its checkpoint (:data:`LAYOUT` updated by ``sizes``)."""
    defaults = {"oellm_model": "qwen3-30b-a3b-tiny", "num_experts": 8, "use_distributed_optimizer": True,
                "num_layers": get_card("qwen3-30b-a3b-tiny").num_layers, "pipeline_model_parallel_layout": None,
                "hybrid_layer_pattern": None,
                "overlap_grad_reduce": False, "ddp_bucket_size": None, "ddp_num_buckets": None,
                "overlap_param_gather_with_optimizer_step": False}
    return argparse.Namespace(**{**defaults, **LAYOUT, **sizes})


def run_args(load: Path, **changes) -> argparse.Namespace:
    """A resuming run's validated arguments loading ``load``: the stored layout with ``changes``."""
    run = stored_args(**{k: v for k, v in changes.items() if k in LAYOUT})
    run.__dict__.update(load=str(load), finetune=False, no_load_optim=None, ckpt_step=None)
    run.__dict__.update({k: v for k, v in changes.items() if k not in LAYOUT})
    return run


def save_dist_checkpoint(directory: Path, stored: argparse.Namespace, sharding: str | None = "dp_reshardable",
                         iteration: int | None = None) -> Path:
    """A ``torch_dist`` training checkpoint holding ``stored`` in ``directory``; returns ``directory``."""
    # ``iter_XXXXXXX`` (``release`` for iteration 0) holds a distributed checkpoint's ``.metadata`` and a
    # ``common.pt`` with ``stored`` and the content metadata megatron records; a random iteration without one.
    iteration = random.randrange(1, 10**6) if iteration is None else iteration
    name = f"iter_{iteration:07d}" if iteration else "release"
    dcp.save({"x": torch.randn(random.randrange(2, 9))}, storage_writer=dcp.FileSystemWriter(directory / name),
             no_dist=True)
    save_config(CheckpointingConfig("torch_dist", 1), str(directory / name))
    metadata = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
    if sharding is not None:
        metadata["distrib_optim_sharding_type"] = sharding
    torch.save({"args": stored, "iteration": iteration, "content_metadata": metadata}, directory / name / "common.pt")
    (directory / "latest_checkpointed_iteration.txt").write_text(f"{iteration or 'release'}\n")
    return directory


def save_rank_files(directory: Path, stored: argparse.Namespace, iteration: int) -> Path:
    """A ``--ckpt-format torch`` checkpoint holding ``stored`` in ``directory``, one file per model-parallel rank."""
    # As megatron-core writes it: ``iter_XXXXXXX/mp_rank_TT_PPP[_EEE]/model_optim_rng.pt`` per model-parallel rank,
    # each holding the run arguments and that rank's model shard.
    pp, ep = stored.pipeline_model_parallel_size, stored.expert_model_parallel_size
    for tp_rank in range(stored.tensor_model_parallel_size):
        for pp_rank in range(pp):
            for ep_rank in range(ep):
                name = f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "") + (
                    f"_{ep_rank:03d}" if ep > 1 else "")
                (directory / f"iter_{iteration:07d}" / name).mkdir(parents=True)
                torch.save({"args": stored, "iteration": iteration, "checkpoint_version": 3.0,
                            "model": {"decoder.layers.0.weight": torch.randn(random.randrange(2, 9), 3)}},
                           directory / f"iter_{iteration:07d}" / name / "model_optim_rng.pt")
    (directory / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return directory


def save_args_checkpoint(fmt: str, target: Path, stored: argparse.Namespace, iteration: int) -> Path:
    """A checkpoint of ``--ckpt-format fmt`` in ``target`` as megatron-core 0.19.2's ``save_checkpoint`` lays it out,
    with its tracker file: ``torch`` one ``mp_rank_00/model_optim_rng.pt`` holding the run arguments ``stored`` and
    random weights; ``torch_dcp`` a DCP checkpoint with the arguments as an object of its state dict. Returns the
    iteration's directory."""
    directory = target / f"iter_{iteration:07d}"
    state = {"args": stored, "iteration": iteration, "checkpoint_version": 3.0,
             "model": {"embedding.word_embeddings.weight": torch.randn(random.randrange(64, 128), 64)}}
    if fmt == "torch":
        (directory / "mp_rank_00").mkdir(parents=True)
        torch.save(state, directory / "mp_rank_00" / "model_optim_rng.pt")
    else:
        dcp.save(state, storage_writer=dcp.FileSystemWriter(directory), no_dist=True)
    (target / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return directory


def converted_random_checkpoint(card_name: str, folder: Path) -> Path:
    """Fresh random Hugging Face weights of card ``card_name`` written to ``folder / "hf"`` and converted by
    ``oellm convert hf-to-mcore`` to ``folder / "mcore"`` (returned: its tracker names ``release``)."""
    from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
    from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

    card = get_card(card_name)
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), folder / "hf")
    hf_to_mcore_checkpoint(card, folder / "hf", folder / "mcore")
    return folder / "mcore"


def run_with_unfinished_save(card_name: str, folder: Path, left_out: tuple[str, ...]) -> tuple[Path, int, int]:
    """A run folder under ``folder`` holding two saves of a converted random checkpoint of ``card_name``: a finished
    one its tracker names and a later one without the files ``left_out`` (a save stopped before it wrote them).
    Returns (run folder, finished iteration, unfinished iteration), both fresh random numbers."""
    import shutil

    converted = converted_random_checkpoint(card_name, folder)
    finished = random.randrange(1, 10**6)
    unfinished = finished + random.randrange(1, 1000)
    for step in (finished, unfinished):
        shutil.copytree(converted / "release", folder / "run" / f"iter_{step:07d}")
    for name in left_out:
        (folder / "run" / f"iter_{unfinished:07d}" / name).unlink(missing_ok=True)
    (folder / "run" / "latest_checkpointed_iteration.txt").write_text(f"{finished}\n")
    return folder / "run", finished, unfinished


def counted_metadata_opens(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Checkpoint directory -> how many times its DCP ``.metadata`` file is opened from now on, by anyone (torch's
    DCP reader opens it with ``Path.open``, patched)."""
    from megatron.oellm.convert.dist_ckpt import METADATA_FILE

    opens: Counter[Path] = Counter()
    open_path = Path.open

    def counted(path: Path, *args, **kwargs):
        if path.name == METADATA_FILE:
            opens[path.parent] += 1
        return open_path(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counted)
    return opens


FINETUNE_CARD = "qwen3-30b-a3b-tiny"
"""The card of the ``--use-checkpoint-args`` tests' checkpoints and runs."""


def entry_args(argv: list[str]) -> argparse.Namespace:
    """A run's arguments as the entry parses them (the card's flags filled in)."""
    return parse_oellm_argv(merge_card_flags(argv).argv)


def checkpoint_with_args(directory: Path, **stored_values: object) -> Path:
    """A ``torch_dist`` checkpoint the training entry saved for :data:`FINETUNE_CARD` with ``stored_values`` in its
    arguments (and the sequence length a training run stores, which megatron takes under ``--use-checkpoint-args``)."""
    stored = entry_args(["--oellm-model", FINETUNE_CARD, "--seq-length", str(random.choice([64, 128]))])
    stored.__dict__.update(stored_values)
    return save_dist_checkpoint(directory, stored, iteration=random.randrange(1, 10**6))


def finetune_argv(load: Path, *flags: str) -> list[str]:
    """A fine-tuning mock-data run of :data:`FINETUNE_CARD` taking its arguments from ``load``."""
    return ["--oellm-model", FINETUNE_CARD, "--oellm-backend", "torch", "--ckpt-format", "torch_dist", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--load", str(load), "--finetune", "--use-checkpoint-args", *flags]
