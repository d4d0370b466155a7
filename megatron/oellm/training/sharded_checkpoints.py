"""FSDP checkpoints megatron-core 0.19.2 fails on: Megatron-FSDP saves of the torch-native experts, FSDP2 resumes.

The torch-native backend keeps each MoE layer's experts in one stacked weight per projection
(:mod:`megatron.oellm.backends.torch_native.grouped_mlp`). Training under either FSDP works (the tiny Qwen3 and
Qwen3.5 cards on an H200, docs/benchmarks.md, session 39); saving differs:

* Megatron-FSDP (``--use-megatron-fsdp``, whose format is ``--ckpt-format fsdp_dtensor``): megatron-core 0.19.2 reads
  an expert index from each expert weight's name (Transformer Engine's ``linear_fc1.weight<N>``) and the first save
  stops with ``AssertionError: Failed to parse expert index from key``. Refused.
* Torch FSDP2 (``--use-torch-fsdp2``): the stacked weights are sharded along the expert axis and checkpointed as
  equal expert blocks, so the experts must split evenly over the ranks FSDP2 shards over (data parallel times context
  parallel, megatron's FSDP2 mesh). Refused where they do not, for ``torch_dist`` saves (``torch_dcp`` saves take the
  model's plain state dict instead, and are refused below).

Resuming under FSDP2 from a ``torch_dist`` checkpoint fails for any model where megatron-core 0.19.2 trains with
torch's own Adam (neither Transformer Engine nor Apex imports): megatron loads that checkpoint's tensors in place and
skips the optimizer's ``load_state_dict`` (``skip_load_to_model_and_opt``), which is where the saved step count goes
back into each parameter's Adam state; the state it set up for loading holds the moments but no ``step``, and the
first step stops with ``KeyError: 'step'`` (the tiny Qwen3 card on an H200, session 39). Refused by
:func:`check_fsdp2_resume`.

FSDP2 with ``--ckpt-format torch_dcp`` saves our models but cannot resume them: megatron-core 0.19.2 wraps the
optimizer of every run outside Megatron-FSDP in its ``ChainedOptimizer`` (an MoE model's dense and expert optimizers
together), and its ``torch_dcp`` load asks that optimizer for ``state_dict(is_loading=True)``, an argument only its
mixed-precision optimizer takes. Every resume stops with a ``TypeError`` after the model is built (the tiny Qwen3 and
Qwen3.5 cards on an H200, session 40), with or without ``--no-load-optim``, which that branch never reads. The call
comes before megatron finds whether ``--load`` holds a checkpoint at all, so an empty ``--load`` fails the same way
(read from its ``load_checkpoint``; not run). :func:`check_fsdp2_torch_dcp` refuses ``torch_dcp`` saves and loads,
so no run writes checkpoints it cannot come back from.

Saving ``torch_dist`` checkpoints with optimizer state under FSDP2 fails for any model on torch 2.13: its
``DTensor.to_local()`` returns a fresh view for a parameter
(pytorch#184422), so megatron-core 0.19.2's optimizer, which finds each parameter's checkpoint tensor by the identity
of ``to_local()``, finds none (its own helpers' entries included; shown on the CPU with torch 2.13.0), and the first
save stops with a ``KeyError``. torch 2.11 (the H200's) returns the stored local tensor. Refused by
:func:`check_fsdp2_saves_on_this_torch`, on the training entry's node (its torch is the run's).

Transformer Engine's experts were not run with Megatron-FSDP or FSDP2 here, so the checks of the stacked experts'
saves leave that backend alone; the ``torch_dcp`` refusal comes from megatron's optimizers and covers both backends.
"""

from __future__ import annotations

import argparse

import torch
from packaging.version import Version

from megatron.oellm.cards import ModelCard
from megatron.oellm.training.stored_checkpoint import StoredCheckpoint, loads_optimizer_state


def check_sharded_data_parallel_saves(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` when validated ``args`` save checkpoints of ``card``'s torch-native MoE experts under
    Megatron-FSDP, or ``torch_dist`` ones under FSDP2 with an expert count its ranks (data parallel x context
    parallel) do not divide (see the module docstring)."""
    from megatron.oellm.backends.selection import resolve_backend  # looked up per call: `oellm recipe` patches it

    if not args.save or not card.num_experts or resolve_backend(args.oellm_backend) != "torch":
        return
    if args.use_megatron_fsdp:
        raise ValueError(f"--use-megatron-fsdp with --save: megatron-core 0.19.2's first checkpoint save of "
                         f"{card.name}'s torch-native MoE experts stops the run with an AssertionError (it reads an "
                         "expert index from Transformer Engine's per-expert weight names, which the stacked weights "
                         "do not have); train with --use-distributed-optimizer instead")
    if not args.use_torch_fsdp2 or args.ckpt_format != "torch_dist":  # only torch_dist saves take our entries
        return
    shards = args.data_parallel_size * args.context_parallel_size  # megatron's FSDP2 mesh: DP with CP
    if card.num_experts % shards:
        raise ValueError(f"--use-torch-fsdp2 with --save: FSDP2 would split {card.name}'s {card.num_experts} experts "
                         f"unevenly over its {shards} ranks (data parallel {args.data_parallel_size} x context "
                         f"parallel {args.context_parallel_size}), and the checkpoint stores equal expert blocks; use "
                         "sizes whose product divides the expert count, or --use-distributed-optimizer")


def check_fsdp2_resume(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when validated ``args`` resume a ``torch_dist`` ``checkpoint`` under FSDP2 with its Adam
    state, on a node where megatron-core trains with torch's Adam, whose first step then fails (see the module
    docstring). Runs that load no optimizer state pass: a first job (no checkpoint yet), ``--no-load-optim``,
    fine-tuning, a ``release`` checkpoint (``oellm convert hf-to-mcore``'s) and one saved with ``--no-save-optim``."""
    from megatron.core import optimizer

    if (not args.use_torch_fsdp2 or args.ckpt_format != "torch_dist" or args.optimizer != "adam"
            or not optimizer.USING_PYTORCH_OPTIMIZER or not loads_optimizer_state(args, checkpoint)):
        return
    raise ValueError(f"--use-torch-fsdp2: resuming from {checkpoint.named_by} fails at the first step with "
                     "KeyError: 'step': megatron-core 0.19.2 loads an FSDP2 torch_dist checkpoint in place and never "
                     "restores the step count of torch's Adam, which this node uses (neither Transformer Engine nor "
                     "Apex imports); add --no-load-optim to resume the weights with a fresh optimizer state, or "
                     "train with --use-distributed-optimizer, whose resume restores it")


def check_fsdp2_torch_dcp(args: argparse.Namespace, card: ModelCard, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when validated ``args`` save ``torch_dcp`` checkpoints of ``card`` under FSDP2, or load in
    that format (``checkpoint``: the one the run loads, None for an empty ``--load``): megatron-core 0.19.2 loads
    none of them (see the module docstring)."""
    if not (args.use_torch_fsdp2 and args.ckpt_format == "torch_dcp"):
        return
    cause = ("megatron-core 0.19.2's torch_dcp load calls state_dict(is_loading=True) on the ChainedOptimizer it wraps "
             "the optimizer in, which takes no such argument: a TypeError after the model is built, with or without "
             "--no-load-optim")
    fix = ("use --ckpt-format torch_dist (resumed under FSDP2 with --no-load-optim), or train with "
           "--use-distributed-optimizer instead of FSDP2")
    if checkpoint is not None:
        raise ValueError(f"--use-torch-fsdp2 --ckpt-format torch_dcp: resuming {card.name} from "
                         f"{checkpoint.named_by} fails: {cause}; {fix}")
    if args.load or args.pretrained_checkpoint:
        given = f"--load {args.load}" if args.load else f"--pretrained-checkpoint {args.pretrained_checkpoint}"
        raise ValueError(f"--use-torch-fsdp2 --ckpt-format torch_dcp with {given}: the load fails before megatron "
                         f"finds that there is no checkpoint to load yet: {cause}; {fix}")
    if args.save:
        raise ValueError(f"--use-torch-fsdp2 --ckpt-format torch_dcp with --save: no run could resume from "
                         f"{card.name}'s checkpoints: {cause}; {fix}")


FRESH_LOCAL_VIEW_TORCH = (2, 13)
"""The first torch release seen whose ``DTensor.to_local()`` returns a fresh view for a parameter (2.13.0 here; 2.11
keeps the identity, 2.12 was not run)."""


def check_fsdp2_saves_on_this_torch(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--use-torch-fsdp2`` saving ``torch_dist`` checkpoints with their optimizer state (the
    only saves that go through megatron's identity map) on a torch from :data:`FRESH_LOCAL_VIEW_TORCH` on, whose first
    checkpoint save megatron-core 0.19.2 then fails (see the module docstring)."""
    if not (args.use_torch_fsdp2 and args.save and args.ckpt_format == "torch_dist" and not args.no_save_optim):
        return
    if Version(torch.__version__).release[:2] < FRESH_LOCAL_VIEW_TORCH:
        return
    raise ValueError(f"--use-torch-fsdp2 with --save: on torch {torch.__version__} DTensor.to_local() returns a new "
                     "view for every parameter, so megatron-core 0.19.2's optimizer finds no parameter's checkpoint "
                     "tensor and the first torch_dist save stops with a KeyError; train with "
                     "--use-distributed-optimizer, or with a torch before 2.13")
