"""megatron-core's own CUDA graphs (``--cuda-graph-impl local`` / ``full_iteration``) against our models.

megatron-core 0.19.2 captures whole layers (or the ``--cuda-graph-modules`` parts of them, ``local``) or the whole
forward and backward (``full_iteration``) at the first training steps. Three parts of our models cannot be captured,
and the run fails there, after the model, optimizer and data are set up:

* MoE layers whose token dispatcher copies the tokens-per-expert counts to the host, which capture forbids
  (``RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture``). The all-gather dispatcher
  (megatron's default) always copies them (``dispatch_postprocess``); measured on an H200 with the training entry on
  the tiny Qwen3 card with whole-layer capture, ``--cuda-graph-modules attn``, ``attn moe_router`` and
  ``full_iteration`` (docs/benchmarks.md, session 38). The all-to-all dispatcher copies them unless it runs
  drop-and-pad (a capacity factor with ``--moe-pad-expert-input-to-capacity``), read from its source; megatron
  documents MoE capture for drop-and-pad layers only. With drop-and-pad, whole-layer, ``attn moe_router`` and
  ``full_iteration`` capture train the tiny Qwen3 card to the losses of the same run without graphs, and
  ``full_iteration`` trains the tiny Qwen3.5 card (session 39).
* The torch-native experts in fp16 or fp32: torch's grouped GEMM runs those dtypes through a fallback that reads
  the group offsets on the host (torch 2.11 on an H200, sm90: bf16 captures, fp16 and fp32 stop with the same
  RuntimeError; session 39). Refused for every capture of an MoE model: the experts ran under capture even with
  ``--cuda-graph-modules attn moe_router``, which megatron's layer code leaves them out of (the first drop-and-pad
  probe of session 39 failed in their host copy), so no capture scope is known to keep them out.
* The Gated DeltaNet layers of a hybrid model: megatron's capture hook on tensors saved for backward fails in their
  forward (``AttributeError: 'NoneType' object has no attribute '_base'``), measured with whole-layer, ``attn`` and
  ``moe_router`` capture on the tiny Qwen3.5 card.

The flex dispatcher (DeepEP, HybridEP) is let through: not measured here.
"""

from __future__ import annotations

import argparse

import torch

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
    dispatcher copies counts to the host (:func:`copies_counts_to_host`), or whose torch-native experts compute in
    a dtype other than bf16."""
    from megatron.oellm.backends.selection import resolve_backend  # looked up per call: `oellm recipe` patches it

    impl = args.cuda_graph_impl
    if impl not in CAPTURING_IMPLS:
        return
    if impl == "local" and card.linear_mixer == "gdn":
        raise ValueError(f"--cuda-graph-impl local: {card.name}'s Gated DeltaNet layers fail in megatron-core 0.19.2's "
                         "CUDA graph capture at the first step (an AttributeError in its hook on tensors saved for "
                         "backward, with whole-layer, attn and moe_router capture alike); drop --cuda-graph-impl")
    if not card.num_experts:
        return
    if copies_counts_to_host(args):
        raise ValueError(f"--cuda-graph-impl {impl}: {card.name}'s MoE layers run the "
                         f"{args.moe_token_dispatcher_type} token dispatcher without drop-and-pad routing, which "
                         "copies the tokens-per-expert counts to the host, and CUDA graph capture forbids that: "
                         "megatron-core 0.19.2 stops with a RuntimeError at the first captured step; drop "
                         "--cuda-graph-impl, or capture with --moe-token-dispatcher-type alltoall "
                         "--moe-expert-capacity-factor F "
                         "--moe-pad-expert-input-to-capacity (megatron captures MoE layers with drop-and-pad only)")
    if resolve_backend(args.oellm_backend) == "torch" and args.params_dtype != torch.bfloat16:
        raise ValueError(f"--cuda-graph-impl {impl}: the torch-native experts in {args.params_dtype} run torch's "
                         "grouped GEMM fallback, which reads the expert offsets on the host, and CUDA graph capture "
                         "forbids that (only bf16 experts captured on the H200); train with --bf16")
