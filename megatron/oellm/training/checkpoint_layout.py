"""Refuse, before Megatron initialises, a resume whose parallel layout the checkpoint's optimizer state cannot follow.

megatron-core 0.19.2 saves distributed-optimizer state in the ``dp_reshardable`` format unless the run passes
``--dist-ckpt-optim-fully-reshardable`` (``_build_sharded_state_dict_metadata`` records the choice as
``content_metadata['distrib_optim_sharding_type']`` in the checkpoint's common state). That format stores each
model-parallel rank's gradient buckets as flat tensors keyed by the rank's index in its model-parallel group, so it
reshards only across data-parallel ranks, and only while every bucket keeps its size:

* a changed tensor or pipeline size is refused by ``load_checkpoint`` with a ``RuntimeError`` that advises
  ``--ckpt-fully-parallel-save`` (a deprecated flag without effect);
* a changed virtual-pipeline, expert or expert-tensor size is not checked at all: the flat tensors differ in shape
  (a failure deep in the load) or, when the sizes happen to match (expert size 2 x expert tensor size 2 saved,
  4 x 1 loaded), the same flat tensors are sliced by another parameter layout: state of other parameters may load
  without a word;
* a changed gradient-bucket size (``--overlap-grad-reduce``, ``--ddp-bucket-size``, ``--ddp-num-buckets``, or the
  default ``max(40000000, 1000000 x DP x CP)`` under ``--overlap-grad-reduce`` when DP x CP crosses 40) fails the
  distributed optimizer's bucket-size assertion.

* a re-split of the pipeline stages at the same sizes (the ``|`` of ``--hybrid-layer-pattern``, or
  ``--pipeline-model-parallel-layout``) moves parameters between stages, so each stage's buckets hold other
  parameters: the distributed optimizer's ``per_bucket_numel_unpadded`` assertion fails (or, where the sizes happen
  to agree, the state of other parameters loads).

All of these happen inside ``load_checkpoint``, after the model and optimizer are allocated on every rank. A changed
data-parallel or context-parallel size with the same buckets loads.

A ``--ckpt-format torch`` checkpoint is one file per model-parallel rank holding that rank's model shard, loaded by
the rank of the same name: its weights follow none of these model-parallel changes (:func:`check_rank_file_layout`),
whatever the optimizer. megatron-core checks only the tensor and pipeline sizes, and only without ``--finetune``;
another expert size makes ranks miss their files (megatron exits), and another virtual-pipeline size or stage split
loads some chunks' layers into others, or none, printing only ``load_return`` (its strict load falls back to a
non-strict one).
"""

from __future__ import annotations

import argparse
from itertools import groupby
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from megatron.oellm.training.stored_checkpoint import StoredCheckpoint

MODEL_SPACE_SIZES = (
    ("tensor_model_parallel_size", "--tensor-model-parallel-size"),
    ("pipeline_model_parallel_size", "--pipeline-model-parallel-size"),
    ("virtual_pipeline_model_parallel_size", "--num-virtual-stages-per-pipeline-rank"),
    ("expert_model_parallel_size", "--expert-model-parallel-size"),
    ("expert_tensor_parallel_size", "--expert-tensor-parallel-size"),
)
"""(argument, flag) of the parallel sizes that change which parameters a rank's optimizer buckets hold."""

STORED_LAYOUT_ARGS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "num_layers")
"""Stored run arguments without which a checkpoint's parallel layout cannot be told (megatron's own saves hold them;
a checkpoint storing fewer is left to megatron's checks)."""

EXPERT_SIZES = {"expert_model_parallel_size", "expert_tensor_parallel_size"}
"""Sizes that matter only for a model with experts (both are 1 / the tensor size otherwise)."""

DEFAULT_BUCKET_MIN = 40_000_000
DEFAULT_BUCKET_PER_DP_RANK = 1_000_000
"""megatron-core 0.19.2's default bucket size under ``--overlap-grad-reduce`` (``resolve_ddp_bucket_size``):
``max(DEFAULT_BUCKET_MIN, DEFAULT_BUCKET_PER_DP_RANK x data-parallel x context-parallel size)``."""


def grad_bucket_size(args: argparse.Namespace) -> int | str | None:
    """The gradient-bucket size the first model chunk of pipeline stage 0 gets under ``args`` (megatron-core
    0.19.2's ``resolve_ddp_bucket_size`` and ``get_model``): None for one bucket, ``"N buckets"`` under
    ``--ddp-num-buckets`` (a size that follows the rank's parameter count), else the size in elements."""
    if not getattr(args, "overlap_grad_reduce", False) or getattr(args, "overlap_param_gather_with_optimizer_step",
                                                                   False):
        return None
    if getattr(args, "ddp_num_buckets", None) is not None:
        return f"{args.ddp_num_buckets} buckets"
    if getattr(args, "ddp_bucket_size", None) is not None:
        return args.ddp_bucket_size
    dp_cp = getattr(args, "data_parallel_size", 1) * (getattr(args, "context_parallel_size", 1) or 1)
    return max(DEFAULT_BUCKET_MIN, DEFAULT_BUCKET_PER_DP_RANK * dp_cp)


SPLIT_CHANGE = "pipeline stage split"
"""How :func:`model_space_changes` names a change of the stages' split (its entry starts with it)."""
SPLIT_FLAGS = "the '|' of --hybrid-layer-pattern, or --pipeline-model-parallel-layout"
"""The flags that place decoder layers on pipeline stages (the entry refuses megatron's other uneven-split flags)."""


def pipeline_stages(args: argparse.Namespace) -> list[list[str]]:
    """The layers of each pipeline stage (vpp-major) as ``args`` place them: the stages of a hybrid pattern's ``|``
    or of ``--pipeline-model-parallel-layout``, else megatron's even split over PP x VPP (embedding first, loss
    last), so that a layout spelling out the even split compares equal to none; no stages where ``args`` give no
    number of layers."""
    from megatron.oellm.models.parallel import (
        HYBRID_SYMBOLS_PER_LAYER,
        layout_from_counts,
        parse_pipeline_layout,
        pipeline_layout_from_hybrid_pattern,
    )

    pattern = getattr(args, "hybrid_layer_pattern", None)
    layout = getattr(args, "pipeline_model_parallel_layout", None)
    if not isinstance(layout, str) and isinstance(pattern, str):
        layout = pipeline_layout_from_hybrid_pattern(pattern.split("/")[0])
    if isinstance(layout, str):
        return parse_pipeline_layout(layout)
    num_stages = (getattr(args, "pipeline_model_parallel_size", None) or 1) * (
        getattr(args, "virtual_pipeline_model_parallel_size", None) or 1)
    num_layers = (len(pattern.split("/")[0]) // HYBRID_SYMBOLS_PER_LAYER if isinstance(pattern, str)
                  else getattr(args, "num_layers", None))
    if not isinstance(num_layers, int):
        return []
    return parse_pipeline_layout(layout_from_counts([num_layers // num_stages] * num_stages))


def stages_text(stages: list[list[str]]) -> str:
    """``stages`` in ``--pipeline-model-parallel-layout`` syntax (``Et*6|t*6L``)."""
    from megatron.oellm.models.parallel import LAYOUT_SYMBOLS

    symbol = {name: char for char, name in LAYOUT_SYMBOLS.items()}
    runs = [[(symbol[name], len(list(group))) for name, group in groupby(stage)] for stage in stages]
    return "|".join("".join(f"{char}*{count}" if count > 1 else char for char, count in stage) for stage in runs)


def _stored_size(stored: argparse.Namespace, name: str) -> int | None:
    """The parallel size ``name`` the checkpoint was saved with: an expert tensor size the stored arguments leave
    unset (a checkpoint of a megatron that did not resolve it, or had none) is the tensor size, as megatron-core's
    ``validate_args`` resolves it and as older megatron sharded experts."""
    saved = getattr(stored, name, None)
    if name == "expert_tensor_parallel_size" and saved is None:
        return getattr(stored, "tensor_model_parallel_size", None)
    return saved


def model_space_changes(stored: argparse.Namespace, args: argparse.Namespace) -> list[str]:
    """``"name (flag): checkpoint X, run Y"`` for each change of which parameters a model-parallel rank holds: the
    sizes of :data:`MODEL_SPACE_SIZES` and, at unchanged numbers of stages and layers, the pipeline stages' split
    (:func:`pipeline_stages`)."""
    has_experts = bool(getattr(stored, "num_experts", None))
    changes = []
    for name, flag in MODEL_SPACE_SIZES:
        if name in EXPERT_SIZES and not has_experts:
            continue
        saved, run = _stored_size(stored, name), getattr(args, name, None)
        if (saved or 1) != (run or 1):  # None (no virtual pipeline) is one stage
            changes.append(f"{name} ({flag}): checkpoint {saved or 1}, run {run or 1}")
    saved_stages, run_stages = pipeline_stages(stored), pipeline_stages(args)
    same_layers = sum(map(len, saved_stages)) == sum(map(len, run_stages))  # else megatron names the model change
    if saved_stages and len(saved_stages) == len(run_stages) and same_layers and saved_stages != run_stages:
        changes.append(f"{SPLIT_CHANGE} ({SPLIT_FLAGS}): checkpoint {stages_text(saved_stages)!r}, run "
                       f"{stages_text(run_stages)!r}")
    return changes


def split_way_out(stored: argparse.Namespace) -> str:
    """The flag that gives this run the checkpoint's pipeline stages back."""
    pattern = getattr(stored, "hybrid_layer_pattern", None)
    if isinstance(pattern, str):
        return f"pass --hybrid-layer-pattern {pattern!r} (the checkpoint's stages)"
    layout = getattr(stored, "pipeline_model_parallel_layout", None)
    if isinstance(layout, str):
        return f"pass --pipeline-model-parallel-layout {layout!r} (the checkpoint's stages)"
    return "drop --pipeline-model-parallel-layout (the checkpoint's stages are the even split)"


def bucket_way_out(stored: argparse.Namespace, saved: int | str | None) -> str:
    """The flags that give this run the checkpoint's gradient buckets back (``saved``: its
    :func:`grad_bucket_size`)."""
    if saved is None:
        return "drop --overlap-grad-reduce (the checkpoint's buckets are one per buffer)"
    if isinstance(saved, str):
        return f"pass --overlap-grad-reduce --ddp-num-buckets {stored.ddp_num_buckets}"
    return f"pass --overlap-grad-reduce --ddp-bucket-size {saved}"


def check_optimizer_resharding(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when ``--load`` resumes a megatron-oellm training checkpoint whose distributed-optimizer
    state is stored in a format that cannot follow this run's parallel layout (see the module docstring), naming the
    changed sizes and the ways out, instead of megatron failing (or, for some expert layouts, loading the wrong
    state) inside ``load_checkpoint`` after allocating the model on every rank.

    ``args`` are the run's validated arguments (``data_parallel_size`` computed), ``checkpoint`` the one it loads as
    read by :func:`megatron.oellm.training.stored_checkpoint.read_loaded_checkpoint`. Runs that load no
    optimizer state (``--finetune``, ``--pretrained-checkpoint`` in place of an empty ``--load``, ``--no-load-optim``,
    no distributed optimizer, a ``release`` checkpoint or one saved with ``--no-save-optim``) and checkpoints other
    programs wrote are left alone; so are ``torch`` checkpoints (:func:`check_rank_file_layout`) and ``torch_dcp`` /
    ``fsdp_dtensor`` ones, whose DTensor state reshards.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    from megatron.oellm.training.stored_checkpoint import loads_optimizer_state, oellm_run_args

    if not loads_optimizer_state(args, checkpoint):
        return
    if not args.use_distributed_optimizer or checkpoint.ckpt_format != "torch_dist":
        return
    directory, common = checkpoint.directory, checkpoint.common
    found = oellm_run_args(common)
    if found is None:
        return
    metadata = common.get("content_metadata")
    sharding = metadata.get("distrib_optim_sharding_type") if isinstance(metadata, dict) else None
    if sharding is None or sharding in DistributedOptimizer.checkpoint_fully_reshardable_formats:
        return
    stored = found[0]
    changes = model_space_changes(stored, args)
    saved_bucket, run_bucket = grad_bucket_size(stored), grad_bucket_size(args)
    if saved_bucket != run_bucket:
        changes.append(f"gradient bucket size (--overlap-grad-reduce, --ddp-bucket-size, --ddp-num-buckets; default "
                       f"max({DEFAULT_BUCKET_MIN}, {DEFAULT_BUCKET_PER_DP_RANK} x DP x CP)): checkpoint "
                       f"{saved_bucket or 'one bucket'}, run {run_bucket or 'one bucket'}")
    if not changes:
        return
    bucket_fix = f"; or {bucket_way_out(stored, saved_bucket)}" if saved_bucket != run_bucket else ""
    split_fix = f"; or {split_way_out(stored)}" if any(c.startswith(SPLIT_CHANGE) for c in changes) else ""
    raise ValueError(
        f"{checkpoint.named_by} ({directory.name}) holds distributed-optimizer state in megatron-core's {sharding!r} "
        f"format, which reshards only across data-parallel ranks with unchanged gradient buckets, and this run "
        f"changes {'; '.join(changes)}. megatron-core would fail inside load_checkpoint after allocating the model "
        f"on every rank (or, for an expert layout of the same shard sizes, may load state of other parameters without a word). "
        f"Pass --no-load-optim to load the weights and start the optimizer state fresh; or resume with the "
        f"checkpoint's layout and --dist-ckpt-optim-fully-reshardable until it saves, which stores the optimizer "
        f"in the 'fully_reshardable' format that any TP/PP/EP/DP layout loads{bucket_fix}{split_fix}")


def check_rank_file_layout(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when the run loads a ``--ckpt-format torch`` checkpoint (one file per model-parallel
    rank) and this run changes which parameters a model-parallel rank holds (:func:`model_space_changes`): its
    weights cannot follow, with or without ``--finetune`` or optimizer state, and megatron-core would fail after
    allocating the model, exit, or load layers into other ones without a word (see the module docstring)."""
    if checkpoint is None or checkpoint.ckpt_format != "torch":
        return
    stored = checkpoint.common.get("args")
    if not isinstance(stored, argparse.Namespace) or not all(hasattr(stored, name) for name in STORED_LAYOUT_ARGS):
        return  # arguments of another program, or too few to tell the layout: megatron's own checks decide
    changes = model_space_changes(stored, args)
    if changes:
        raise ValueError(
            f"{checkpoint.named_by} ({checkpoint.directory.name}) is a --ckpt-format torch checkpoint, one file per "
            f"model-parallel rank that only the layout which saved it loads, and this run changes "
            f"{'; '.join(changes)}. Resume with the checkpoint's layout; to change it, convert the checkpoint once: "
            f"run with its layout, --load {checkpoint.given}, "
            f"--ckpt-convert-format torch_dist --ckpt-convert-save DIR and "
            f"--dist-ckpt-optim-fully-reshardable (megatron saves it as DIR/torch_dist and exits), then "
            f"{checkpoint.flag} DIR/torch_dist --ckpt-format torch_dist, whose weights and optimizer state load into any layout")


def check_checkpoint_format(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when this run's ``--ckpt-format`` cannot load the format of the checkpoint it loads
    (``--load``, or ``--pretrained-checkpoint`` in place of an empty one): megatron-core 0.19.2's
    ``load_checkpoint`` builds the state dict to load for the run's format (``generate_state_dict`` reads
    ``args.ckpt_format``) and detects the checkpoint's only on the way, so a ``torch_dist`` checkpoint under
    ``--ckpt-format torch`` stops with a ``RuntimeError`` or, under ``--auto-detect-ckpt-format`` (which detects the
    format but still builds plain tensors, which the distributed load drops), with a ``KeyError`` on ``'model'``, and
    so does one under ``torch_dcp`` or ``fsdp_dtensor`` (their state dicts hold plain tensors too); a ``torch_dcp`` /
    ``fsdp_dtensor`` one under ``torch`` or ``torch_dist`` fails on an empty state dict. All of them
    after the model is allocated on every rank."""
    if checkpoint is None:
        return
    run, stored = args.ckpt_format, checkpoint.ckpt_format
    if stored == "torch_dist" and run != "torch_dist":
        fix = (f"--ckpt-format torch_dist (--auto-detect-ckpt-format does not help: megatron still builds the state "
               f"dict for {run})")
    elif stored == "torch_dcp" and run in ("torch", "torch_dist"):
        fix = "the --ckpt-format that saved it (torch_dcp, or fsdp_dtensor for a Megatron-FSDP run)"
    else:
        return
    what = "DCP checkpoint without metadata.json" if stored == "torch_dcp" else f"{stored} checkpoint"
    raise ValueError(f"{checkpoint.named_by} ({checkpoint.directory.name}) is a {what}, which --ckpt-format {run} "
                     f"cannot load (megatron-core would fail after allocating the model on every rank); pass {fix}")
