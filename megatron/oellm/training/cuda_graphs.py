"""megatron-core's own CUDA graphs (``--cuda-graph-impl local`` / ``full_iteration``) against our models.

megatron-core 0.19.2 captures whole layers (or the ``--cuda-graph-modules`` parts of them, ``local``) or the whole
forward and backward (``full_iteration``) at the first training steps. Two parts of our models cannot be captured, and
the run fails there, after the model, optimizer and data are set up:

* MoE layers whose token dispatcher copies the tokens-per-expert counts to the host, which capture forbids
  (``RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture``). The all-gather dispatcher
  (megatron's default) always copies them (``dispatch_postprocess``); measured on an H200 with the training entry on
  the tiny Qwen3 card with whole-layer capture, ``--cuda-graph-modules attn``, ``attn moe_router`` and
  ``full_iteration`` (docs/benchmarks.md, session 38). The all-to-all dispatcher copies them unless it runs
  drop-and-pad (a capacity factor with ``--moe-pad-expert-input-to-capacity``), read from its source, not run here;
  megatron documents MoE capture for drop-and-pad layers only.
* The Gated DeltaNet layers of a hybrid model: megatron's capture hook on tensors saved for backward fails in their
  forward (``AttributeError: 'NoneType' object has no attribute '_base'``), measured with whole-layer, ``attn`` and
  ``moe_router`` capture on the tiny Qwen3.5 card.

The flex dispatcher (DeepEP, HybridEP) is let through: not measured here.
"""

from __future__ import annotations

import argparse

from megatron.oellm.cards import ModelCard

CAPTURING_IMPLS = ("local", "full_iteration")
"""``--cuda-graph-impl`` values whose capture is megatron-core's own (``transformer_engine`` is TE's, which the
torch-native backend refuses and the TE backend has not been measured with here)."""


def copies_counts_to_host(args: argparse.Namespace) -> bool:
    """Whether the MoE token dispatcher of ``args`` copies the tokens-per-expert counts to the host in each step:
    the all-gather dispatcher always, the all-to-all one unless it runs drop-and-pad."""
    drop_and_pad = args.moe_expert_capacity_factor is not None and args.moe_pad_expert_input_to_capacity
    return args.moe_token_dispatcher_type == "allgather" or (
        args.moe_token_dispatcher_type == "alltoall" and not drop_and_pad)


def check_cuda_graphs(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` for a ``--cuda-graph-impl`` of :data:`CAPTURING_IMPLS` on ``card`` where the capture
    fails at the first steps: ``local`` on a hybrid model with Gated DeltaNet layers; either on an MoE model whose
    dispatcher copies counts to the host (:func:`copies_counts_to_host`)."""
    impl = args.cuda_graph_impl
    if impl not in CAPTURING_IMPLS:
        return
    if impl == "local" and card.linear_mixer == "gdn":
        raise ValueError(f"--cuda-graph-impl local: {card.name}'s Gated DeltaNet layers fail in megatron-core 0.19.2's "
                         "CUDA graph capture at the first step (an AttributeError in its hook on tensors saved for "
                         "backward, with whole-layer, attn and moe_router capture alike); drop --cuda-graph-impl")
    if card.num_experts and copies_counts_to_host(args):
        raise ValueError(f"--cuda-graph-impl {impl}: {card.name}'s MoE layers run the "
                         f"{args.moe_token_dispatcher_type} token dispatcher without drop-and-pad routing, which "
                         "copies the tokens-per-expert counts to the host, and CUDA graph capture forbids that: "
                         "megatron-core 0.19.2 stops with a RuntimeError at the first captured step; drop "
                         "--cuda-graph-impl, or capture with --moe-token-dispatcher-type alltoall "
                         "--moe-expert-capacity-factor F "
                         "--moe-pad-expert-input-to-capacity (megatron captures MoE layers with drop-and-pad only)")
