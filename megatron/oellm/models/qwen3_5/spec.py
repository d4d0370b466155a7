"""Qwen3.5 (Gated DeltaNet + gated attention hybrid, MoE) as a megatron-core ``HybridModel``.

Each decoder layer of the card becomes two hybrid layers: its token mixer (``G`` Gated DeltaNet or ``*`` gated
softmax attention) and ``E`` (the MoE block with its pre-norm). Pipeline stage boundaries of the layout are written
into the pattern as ``|`` (megatron-core's fVPP syntax), so PP, VPP and custom layouts all go through the pattern.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.backends import BackendSpecProvider
from megatron.core.models.hybrid.hybrid_block import HybridStack, HybridStackSubmodules
from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import (
    MoETransformerLayer,
    TransformerLayer,
    TransformerLayerSubmodules,
)

from megatron.oellm.cards import ModelCard
from megatron.oellm.models.building_blocks import (
    attention_spec,
    check_backend,
    check_family,
    common_config_kwargs,
    config_with_runtime_defaults,
    language_model_kwargs,
    moe_builder,
    norm_and_input_linear,
    spec_provider,
)
from megatron.oellm.models.language_model import OellmHybridModel
from megatron.oellm.models.parallel import SINGLE_GPU, ParallelLayout, pipelined_hybrid_pattern

FAMILY = "qwen3_5"


class BackendHybridStack(HybridStack):
    """``HybridStack`` whose final norm comes from the backend (megatron-core's stack always builds a TE norm)."""

    def __init__(self, config: TransformerConfig, submodules: HybridStackSubmodules, *, final_norm: type,
                 post_layer_norm: bool = True, **kwargs: Any) -> None:
        """Build the stack without its final norm, then add ``final_norm`` where the stack ends the model."""
        super().__init__(config, submodules, post_layer_norm=False, **kwargs)
        self.post_layer_norm = post_layer_norm
        if self.post_process and self.post_layer_norm:
            self.final_norm = final_norm(config=config, hidden_size=config.hidden_size, eps=config.layernorm_epsilon)


def check_card(card: ModelCard) -> None:
    """Raise ``ValueError`` unless ``card`` is a Qwen3.5-style card (GDN linear mixer)."""
    check_family(card, FAMILY, "gdn")


def hybrid_layer_pattern(card: ModelCard, layout: ParallelLayout = SINGLE_GPU) -> str:
    """The card's hybrid pattern with ``|`` between pipeline stages (see :func:`pipelined_hybrid_pattern`)."""
    return pipelined_hybrid_pattern(card, layout)


def config_kwargs(card: ModelCard, layout: ParallelLayout = SINGLE_GPU,
                  params_dtype: torch.dtype = torch.bfloat16) -> dict:
    """The TransformerConfig fields the card and layout own (architecture, parallel sizes, dtype)."""
    check_card(card)
    kwargs = common_config_kwargs(card, layout, params_dtype)
    kwargs.update(
        num_layers=2 * card.num_layers,
        is_hybrid_model=True,
        virtual_pipeline_model_parallel_size=layout.vpp_size if layout.vpp_size > 1 else None,
        linear_conv_kernel_dim=card.linear_conv_kernel_dim,
        linear_key_head_dim=card.linear_key_head_dim,
        linear_value_head_dim=card.linear_value_head_dim,
        linear_num_key_heads=card.linear_num_key_heads,
        linear_num_value_heads=card.linear_num_value_heads,
    )
    return kwargs


def transformer_config(card: ModelCard, layout: ParallelLayout = SINGLE_GPU,
                       params_dtype: torch.dtype = torch.bfloat16, **overrides: Any) -> TransformerConfig:
    """megatron-core ``TransformerConfig`` of ``card`` under ``layout``; ``overrides`` replace any field.

    ``num_layers`` counts hybrid layers (two per decoder layer); the GDN shape goes into the ``linear_*`` fields.
    The pipeline layout lives in the hybrid pattern, so ``pipeline_model_parallel_layout`` stays unset.
    """
    return config_with_runtime_defaults(config_kwargs(card, layout, params_dtype), overrides)


def hybrid_stack_spec(card: ModelCard, backend: str | BackendSpecProvider = "auto") -> ModuleSpec:
    """``HybridStack`` spec of ``card``: GDN, gated-attention and MoE layers built from ``backend``'s modules."""
    check_card(card)
    provider = spec_provider(backend)
    input_norm, input_linear = norm_and_input_linear(provider)
    norm = provider.layer_norm(rms_norm=True)
    gdn_layer = ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            input_layernorm=input_norm,
            self_attention=ModuleSpec(
                module=GatedDeltaNet,
                submodules=GatedDeltaNetSubmodules(
                    in_proj=input_linear, out_norm=norm, out_proj=provider.row_parallel_linear()),
            ),
            self_attn_bda=get_bias_dropout_add,
        ),
    )
    attention_layer = ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            input_layernorm=input_norm, self_attention=attention_spec(provider, card), self_attn_bda=get_bias_dropout_add),
    )
    moe_layer = ModuleSpec(
        module=MoETransformerLayer,
        submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=norm, mlp=moe_builder(provider, card), mlp_bda=get_bias_dropout_add),
    )
    return ModuleSpec(
        module=BackendHybridStack,
        params={"final_norm": norm},
        submodules=HybridStackSubmodules(gdn_layer=gdn_layer, attention_layer=attention_layer, moe_layer=moe_layer),
    )


def build_model(card: ModelCard, layout: ParallelLayout = SINGLE_GPU, backend: str | BackendSpecProvider = "auto",
                *, config: TransformerConfig | None = None, pre_process: bool = True, post_process: bool = True,
                vp_stage: int | None = None, params_dtype: torch.dtype = torch.bfloat16) -> OellmHybridModel:
    """The ``HybridModel`` (this pipeline rank's part) of ``card``; needs megatron-core's parallel state (a GPU)."""
    config = config or transformer_config(card, layout, params_dtype)
    check_backend(backend, config)
    return OellmHybridModel(
        config=config,
        hybrid_stack_spec=hybrid_stack_spec(card, backend),
        hybrid_layer_pattern=hybrid_layer_pattern(card, layout),
        **language_model_kwargs(card, pre_process, post_process, vp_stage),
    )
