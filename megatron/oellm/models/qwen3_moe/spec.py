"""Qwen3 MoE (softmax attention with QK-norm, every layer MoE) as a megatron-core ``GPTModel``.

Every decoder layer is one ``TransformerLayer``: pre-norm, GQA ``SelfAttention`` with QK RMSNorm, pre-MLP norm and
``MoELayer`` with grouped experts. A custom pipeline layout goes to megatron-core as
``pipeline_model_parallel_layout``; without one the layers are split evenly over PP x VPP.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.backends import BackendSpecProvider
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

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
from megatron.oellm.models.language_model import OellmGPTModel
from megatron.oellm.models.parallel import SINGLE_GPU, ParallelLayout

FAMILY = "qwen3_moe"


def check_card(card: ModelCard) -> None:
    """Raise ``ValueError`` unless ``card`` is a Qwen3 MoE-style card (attention only)."""
    check_family(card, FAMILY, "none")


def config_kwargs(card: ModelCard, layout: ParallelLayout = SINGLE_GPU,
                  params_dtype: torch.dtype = torch.bfloat16) -> dict:
    """The TransformerConfig fields the card and layout own (architecture, parallel sizes, dtype)."""
    check_card(card)
    kwargs = common_config_kwargs(card, layout, params_dtype)
    kwargs.update(num_layers=card.num_layers, pipeline_model_parallel_layout=layout.pipeline_layout)
    if layout.pipeline_layout is None and layout.vpp_size > 1:
        kwargs.update(virtual_pipeline_model_parallel_size=layout.vpp_size)
    return kwargs


def transformer_config(card: ModelCard, layout: ParallelLayout = SINGLE_GPU,
                       params_dtype: torch.dtype = torch.bfloat16, **overrides: Any) -> TransformerConfig:
    """megatron-core ``TransformerConfig`` of ``card`` under ``layout``; ``overrides`` replace any field."""
    return config_with_runtime_defaults(config_kwargs(card, layout, params_dtype), overrides)


def layer_spec(card: ModelCard, backend: str | BackendSpecProvider = "auto") -> ModuleSpec:
    """One Qwen3 MoE decoder layer (attention + MoE) built from ``backend``'s modules."""
    check_card(card)
    provider = spec_provider(backend)
    input_norm, _ = norm_and_input_linear(provider)
    return ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            input_layernorm=input_norm,
            self_attention=attention_spec(provider, card),
            self_attn_bda=get_bias_dropout_add,
            pre_mlp_layernorm=provider.layer_norm(rms_norm=True),
            mlp=moe_builder(provider, card),
            mlp_bda=get_bias_dropout_add,
        ),
    )


def block_spec(card: ModelCard, num_layers: int, backend: str | BackendSpecProvider = "auto") -> TransformerBlockSubmodules:
    """``num_layers`` decoder layers (one pipeline stage's share) plus the final norm, from ``backend``'s modules."""
    provider = spec_provider(backend)
    return TransformerBlockSubmodules(layer_specs=[layer_spec(card, provider)] * num_layers,
                                      layer_norm=provider.layer_norm(rms_norm=True))


def build_model(card: ModelCard, layout: ParallelLayout = SINGLE_GPU, backend: str | BackendSpecProvider = "auto",
                *, config: TransformerConfig | None = None, pre_process: bool = True, post_process: bool = True,
                vp_stage: int | None = None, params_dtype: torch.dtype = torch.bfloat16) -> OellmGPTModel:
    """The ``GPTModel`` (this pipeline rank's part) of ``card``; needs megatron-core's parallel state (a GPU)."""
    config = config or transformer_config(card, layout, params_dtype)
    check_backend(backend, config)
    return OellmGPTModel(
        config=config,
        transformer_layer_spec=block_spec(card, get_num_layers_to_build(config, vp_stage=vp_stage), backend),
        **language_model_kwargs(card, pre_process, post_process, vp_stage),
    )
