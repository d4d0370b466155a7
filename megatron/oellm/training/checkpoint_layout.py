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

All of these happen inside ``load_checkpoint``, after the model and optimizer are allocated on every rank. A changed
data-parallel or context-parallel size with the same buckets loads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

MODEL_SPACE_SIZES = (
    ("tensor_model_parallel_size", "--tensor-model-parallel-size"),
    ("pipeline_model_parallel_size", "--pipeline-model-parallel-size"),
    ("virtual_pipeline_model_parallel_size", "--num-virtual-stages-per-pipeline-rank"),
    ("expert_model_parallel_size", "--expert-model-parallel-size"),
    ("expert_tensor_parallel_size", "--expert-tensor-parallel-size"),
)
"""(argument, flag) of the parallel sizes that change which parameters a rank's optimizer buckets hold."""

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


def layout_changes(stored: argparse.Namespace, args: argparse.Namespace) -> list[str]:
    """``"name (flag): checkpoint X, run Y"`` for each size a ``dp_reshardable`` optimizer checkpoint cannot follow:
    the model-space sizes of :data:`MODEL_SPACE_SIZES` and the gradient-bucket size (:func:`grad_bucket_size`)."""
    has_experts = bool(getattr(stored, "num_experts", None))
    changes = []
    for name, flag in MODEL_SPACE_SIZES:
        if name in EXPERT_SIZES and not has_experts:
            continue
        saved, run = getattr(stored, name, None), getattr(args, name, None)
        if (saved or 1) != (run or 1):  # None (no virtual pipeline) is one stage
            changes.append(f"{name} ({flag}): checkpoint {saved or 1}, run {run or 1}")
    saved_bucket, run_bucket = grad_bucket_size(stored), grad_bucket_size(args)
    if saved_bucket != run_bucket:
        changes.append(f"gradient bucket size (--overlap-grad-reduce, --ddp-bucket-size, --ddp-num-buckets; default "
                       f"max({DEFAULT_BUCKET_MIN}, {DEFAULT_BUCKET_PER_DP_RANK} x DP x CP)): checkpoint "
                       f"{saved_bucket or 'one bucket'}, run {run_bucket or 'one bucket'}")
    return changes


def bucket_way_out(stored: argparse.Namespace) -> str:
    """The flags that give this run the checkpoint's gradient buckets back."""
    saved = grad_bucket_size(stored)
    if saved is None:
        return "drop --overlap-grad-reduce (the checkpoint's buckets are one per buffer)"
    if isinstance(saved, str):
        return f"pass --overlap-grad-reduce --ddp-num-buckets {stored.ddp_num_buckets}"
    return f"pass --overlap-grad-reduce --ddp-bucket-size {saved}"


def check_optimizer_resharding(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` when ``--load`` resumes a megatron-oellm training checkpoint whose distributed-optimizer
    state is stored in a format that cannot follow this run's parallel layout (see the module docstring), naming the
    changed sizes and the ways out, instead of megatron failing (or, for some expert layouts, loading the wrong
    state) inside ``load_checkpoint`` after allocating the model on every rank.

    ``args`` are the run's validated arguments (``data_parallel_size`` computed). Runs that load no optimizer state
    (``--finetune``, ``--no-load-optim``, no distributed optimizer, a ``release`` checkpoint or one saved with
    ``--no-save-optim``) and checkpoints other programs wrote are left alone.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    from megatron.oellm.training.stored_checkpoint import oellm_run_args, read_common_state

    if not args.load or args.finetune or args.no_load_optim or not args.use_distributed_optimizer:
        return
    read = read_common_state(Path(args.load), getattr(args, "ckpt_step", None))
    if read is None:
        return
    directory, common = read
    found = oellm_run_args(common)
    if found is None or getattr(found[0], "no_save_optim", False):
        return
    if directory.name == "release":  # megatron reads no optimizer state from a release checkpoint
        return
    metadata = common.get("content_metadata")
    sharding = metadata.get("distrib_optim_sharding_type") if isinstance(metadata, dict) else None
    if sharding is None or sharding in DistributedOptimizer.checkpoint_fully_reshardable_formats:
        return
    stored = found[0]
    changes = layout_changes(stored, args)
    if not changes:
        return
    bucket_changed = grad_bucket_size(stored) != grad_bucket_size(args)
    bucket_fix = f"; or {bucket_way_out(stored)}" if bucket_changed else ""
    raise ValueError(
        f"--load {args.load} ({directory.name}) holds distributed-optimizer state in megatron-core's {sharding!r} "
        f"format, which reshards only across data-parallel ranks with unchanged gradient buckets, and this run "
        f"changes {'; '.join(changes)}. megatron-core would fail inside load_checkpoint after allocating the model "
        f"on every rank (or, for an expert layout of the same shard sizes, may load state of other parameters without a word). "
        f"Pass --no-load-optim to load the weights and start the optimizer state fresh; or resume with the "
        f"checkpoint's layout and --dist-ckpt-optim-fully-reshardable until it saves, which stores the optimizer "
        f"in the 'fully_reshardable' format that any TP/PP/EP/DP layout loads{bucket_fix}")
