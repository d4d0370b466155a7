"""Megatron ``model_provider``: the ``--oellm-model`` card built by its family's spec builder.

The architecture comes from the card (``--oellm-model``, already merged into Megatron's flags by the entry, or
rebuilt from Megatron's architecture flags when no model is named); the training
runtime settings (initialisation, recomputation, loss reduction, dispatcher, dropout) come from Megatron's own
arguments of the same names, as Megatron's ``core_transformer_config_from_args`` copies them.
"""

from __future__ import annotations

import argparse

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.models.parallel import ParallelLayout, pipeline_layout_from_hybrid_pattern
from megatron.oellm.training.card_from_args import card_from_megatron_args

RUNTIME_FIELDS = (
    "init_method_std", "perform_initialization", "use_cpu_initialization", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "recompute_modules", "calculate_per_token_loss",
    "cross_entropy_loss_fusion", "cross_entropy_fusion_impl", "moe_token_dispatcher_type", "moe_permute_fusion",
    "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity", "overlap_p2p_comm", "variable_seq_lengths",
    "microbatch_group_size_per_vp_stage", "barrier_with_L1_time", "hidden_dropout", "attention_dropout",
)
"""TransformerConfig fields taken from Megatron's arguments of the same name instead of the family's defaults."""

TE_ONLY_RUNTIME_FIELDS = ("gradient_accumulation_fusion",)
"""Runtime fields taken from Megatron's arguments only on the TE backend (the kernel comes with TE or apex)."""


def card_from_args(args: argparse.Namespace) -> ModelCard:
    """The run's card with the padded vocabulary Megatron chose (the embedding's real size).

    ``--oellm-model``'s card when given, else the card Megatron's architecture flags describe.
    """
    card = get_card(args.oellm_model) if args.oellm_model else card_from_megatron_args(args)
    return card.with_vocab(args.padded_vocab_size)


def layout_from_args(args: argparse.Namespace) -> ParallelLayout:
    """The model-parallel layout of Megatron's parallel-size arguments.

    Hybrid models carry their pipeline stages as ``|`` in ``--hybrid-layer-pattern`` (Megatron refuses a
    ``--pipeline-model-parallel-layout`` for them): those stages become the layout's pipeline layout, so an uneven
    split such as the MN5 report's 6/6/6/3/6/6/6/1 is built as given.
    """
    custom = args.pipeline_model_parallel_layout
    if not isinstance(custom, str) and getattr(args, "hybrid_layer_pattern", None):
        custom = pipeline_layout_from_hybrid_pattern(args.hybrid_layer_pattern)
    return ParallelLayout(
        tp=args.tensor_model_parallel_size,
        pp=args.pipeline_model_parallel_size,
        vpp=None if isinstance(custom, str) else args.virtual_pipeline_model_parallel_size,
        ep=args.expert_model_parallel_size,
        etp=args.expert_tensor_parallel_size or 1,
        cp=args.context_parallel_size,
        sp=args.sequence_parallel,
        pipeline_layout=custom if isinstance(custom, str) else None,
    )


def runtime_overrides(args: argparse.Namespace) -> dict:
    """TransformerConfig runtime fields from ``args``, as Megatron's ``core_transformer_config_from_args`` sets them.

    Only the runtime fields: building Megatron's whole config would also validate Megatron's TE-only defaults
    (e.g. RoPE fusion), which the torch backend does not use.
    """
    from megatron.oellm.backends.selection import resolve_backend

    names = RUNTIME_FIELDS + (TE_ONLY_RUNTIME_FIELDS if resolve_backend(args.oellm_backend) == "te" else ())
    overrides = {name: getattr(args, name) for name in names if hasattr(args, name)}
    overrides.update(deallocate_pipeline_outputs=True, batch_p2p_comm=not args.overlap_p2p_comm)
    return overrides


def model_provider(pre_process: bool = True, post_process: bool = True, vp_stage: int | None = None,
                   config=None, pg_collection=None):
    """Build this rank's part of the card's model with the ``--oellm-backend`` modules (Megatron calls this)."""
    from megatron.training import get_args, print_rank_0

    from megatron.oellm.models import spec_builder

    args = get_args()
    card = card_from_args(args)
    layout = layout_from_args(args)
    family = spec_builder(card.family)
    transformer_config = family.transformer_config(card, layout, args.params_dtype, **runtime_overrides(args))
    print_rank_0(f"> building {card.name} ({card.family}, backend {args.oellm_backend})")
    return family.build_model(card, layout, args.oellm_backend, config=transformer_config, pre_process=pre_process,
                              post_process=post_process, vp_stage=vp_stage, params_dtype=args.params_dtype)
