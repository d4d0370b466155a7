"""megatron-core's own CUDA graphs (``--cuda-graph-impl local`` / ``full_iteration``) against our models.

megatron-core 0.19.2 captures whole layers (or the ``--cuda-graph-modules`` parts of them, ``local``) or the whole
forward and backward (``full_iteration``) at the first training steps. Two parts of our models cannot be captured, and
the run fails there, after the model, optimizer and data are set up (measured on an H200 with the training entry,
tiny cards, torch-native backend, docs/benchmarks.md session 38):

* the dropless MoE layers: the all-to-all dispatcher copies the tokens-per-expert counts to the host, which capture
  forbids (``RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture``), with whole-layer
  capture, with ``--cuda-graph-modules attn`` or ``attn moe_router``, and with ``full_iteration``; megatron documents
  MoE capture for drop-and-pad layers only;
* the Gated DeltaNet layers of a hybrid model: megatron's capture hook on tensors saved for backward fails in their
  forward (``AttributeError: 'NoneType' object has no attribute '_base'``), with whole-layer, ``attn`` and
  ``moe_router`` capture.
"""

from __future__ import annotations

import argparse

from megatron.oellm.cards import ModelCard

CAPTURING_IMPLS = ("local", "full_iteration")
"""``--cuda-graph-impl`` values whose capture is megatron-core's own (``transformer_engine`` is TE's, which the
torch-native backend refuses and the TE backend has not been measured with here)."""


def check_cuda_graphs(args: argparse.Namespace, card: ModelCard) -> None:
    """Raise ``ValueError`` for a ``--cuda-graph-impl`` of :data:`CAPTURING_IMPLS` on ``card`` where the capture
    fails at the first steps: ``local`` on a hybrid model with Gated DeltaNet layers, either on a dropless MoE model
    (no ``--moe-expert-capacity-factor``)."""
    impl = getattr(args, "cuda_graph_impl", "none")
    if impl not in CAPTURING_IMPLS:
        return
    if impl == "local" and card.linear_mixer == "gdn":
        raise ValueError(f"--cuda-graph-impl local: {card.name}'s Gated DeltaNet layers fail in megatron-core 0.19.2's "
                         "CUDA graph capture at the first step (an AttributeError in its hook on tensors saved for "
                         "backward, with whole-layer, attn and moe_router capture alike); drop --cuda-graph-impl")
    if card.num_experts and args.moe_expert_capacity_factor is None:
        raise ValueError(f"--cuda-graph-impl {impl}: {card.name}'s MoE layers are dropless (no "
                         "--moe-expert-capacity-factor), and their token dispatcher copies the tokens-per-expert "
                         "counts to the host, which CUDA graph capture forbids: megatron-core 0.19.2 stops with a "
                         "RuntimeError at the first captured step; drop --cuda-graph-impl (megatron captures MoE "
                         "layers with drop-and-pad routing only)")
