"""Checkpoint saves of fully sharded data-parallel runs, which fail with the torch-native experts.

The torch-native backend keeps each MoE layer's experts in one stacked weight per projection
(:mod:`megatron.oellm.backends.torch_native.grouped_mlp`). Training under either FSDP works (the tiny Qwen3 and
Qwen3.5 cards on an H200, docs/benchmarks.md, session 39), but megatron-core 0.19.2's checkpoint code for both expects
Transformer Engine's per-expert weights, and the first save stops the run:

* Megatron-FSDP (``--use-megatron-fsdp``, whose format is ``--ckpt-format fsdp_dtensor``): megatron reads an expert
  index from each expert weight's name (``linear_fc1.weight<N>``) and stops with ``AssertionError: Failed to parse
  expert index from key``.
* Torch FSDP2 (``--use-torch-fsdp2``): megatron finds the model tensor of each optimizer parameter by the identity of
  the parameter's local shard, which its own checkpoint helpers store; the stacked weights' checkpoint tensors hold
  the sharded parameter itself, so the optimizer's save stops with a ``KeyError``.

Transformer Engine's experts were not run with either here, so the check leaves that backend alone.
"""

from __future__ import annotations

import argparse

from megatron.oellm.cards import ModelCard

SHARDED_DATA_PARALLEL_FAILURES = (
    ("--use-megatron-fsdp", "use_megatron_fsdp", "an AssertionError (it cannot read an expert index from "
     "the stacked weights' names)"),
    ("--use-torch-fsdp2", "use_torch_fsdp2", "a KeyError (it cannot match the stacked weights to their "
     "optimizer state)"),
)
"""(flag, argument, how megatron-core 0.19.2's first checkpoint save fails) for each fully sharded data parallelism."""


def check_sharded_data_parallel_saves(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` when validated ``args`` save checkpoints of ``card``'s torch-native MoE experts under
    Megatron-FSDP or torch FSDP2, whose first save fails (see the module docstring)."""
    from megatron.oellm.backends.selection import resolve_backend  # looked up per call: `oellm recipe` patches it

    if not args.save or not card.num_experts or resolve_backend(args.oellm_backend) != "torch":
        return
    for flag, name, failure in SHARDED_DATA_PARALLEL_FAILURES:
        if getattr(args, name, False):
            raise ValueError(f"{flag} with --save: megatron-core 0.19.2's first checkpoint save of {card.name}'s "
                             f"torch-native MoE experts stops the run with {failure}; train with "
                             "--use-distributed-optimizer instead, whose checkpoints hold the stacked experts")
