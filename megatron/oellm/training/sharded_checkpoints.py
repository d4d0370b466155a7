"""Checkpoint saves of fully sharded data-parallel runs with the torch-native experts.

The torch-native backend keeps each MoE layer's experts in one stacked weight per projection
(:mod:`megatron.oellm.backends.torch_native.grouped_mlp`). Training under either FSDP works (the tiny Qwen3 and
Qwen3.5 cards on an H200, docs/benchmarks.md, session 39); saving differs:

* Megatron-FSDP (``--use-megatron-fsdp``, whose format is ``--ckpt-format fsdp_dtensor``): megatron-core 0.19.2 reads
  an expert index from each expert weight's name (Transformer Engine's ``linear_fc1.weight<N>``) and the first save
  stops with ``AssertionError: Failed to parse expert index from key``. Refused.
* Torch FSDP2 (``--use-torch-fsdp2``): the stacked weights are sharded along the expert axis and checkpointed as
  equal expert blocks, so the experts must split evenly over the data-parallel ranks. Refused where they do not.

Transformer Engine's experts were not run with either here, so the check leaves that backend alone.
"""

from __future__ import annotations

import argparse

from megatron.oellm.cards import ModelCard


def check_sharded_data_parallel_saves(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` when validated ``args`` save checkpoints of ``card``'s torch-native MoE experts under
    Megatron-FSDP, or under FSDP2 with an expert count the data-parallel ranks do not divide (see the module
    docstring)."""
    from megatron.oellm.backends.selection import resolve_backend  # looked up per call: `oellm recipe` patches it

    if not args.save or not card.num_experts or resolve_backend(args.oellm_backend) != "torch":
        return
    if args.use_megatron_fsdp:
        raise ValueError(f"--use-megatron-fsdp with --save: megatron-core 0.19.2's first checkpoint save of "
                         f"{card.name}'s torch-native MoE experts stops the run with an AssertionError (it reads an "
                         "expert index from Transformer Engine's per-expert weight names, which the stacked weights "
                         "do not have); train with --use-distributed-optimizer or --use-torch-fsdp2 instead")
    if args.use_torch_fsdp2 and card.num_experts % args.data_parallel_size:
        raise ValueError(f"--use-torch-fsdp2 with --save: FSDP2 would split {card.name}'s {card.num_experts} experts "
                         f"unevenly over {args.data_parallel_size} data-parallel ranks, and the checkpoint stores "
                         "equal expert blocks; use a data-parallel size that divides the expert count, or "
                         "--use-distributed-optimizer")
