"""Pieces shared by the spec builders: backend resolution, the common TransformerConfig fields, attention and MoE.

Everything is built from megatron-core's own modules (``SelfAttention`` with ``attention_output_gate`` and QK-norm,
``MoELayer`` with a gated shared expert and grouped experts); a :class:`BackendSpecProvider` decides which linear,
norm and attention-kernel classes fill them, so one builder serves Transformer Engine and the torch-native backend.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.models.backends import BackendSpecProvider
from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec_for_backend
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import MlpBuilder

from megatron.oellm.cards import ModelCard
from megatron.oellm.megatron_args import every_layer_moe
from megatron.oellm.models.parallel import ParallelLayout, validate_layout
from megatron.oellm.patches import moe_permutation, recompute_without_te


def spec_provider(backend: str | BackendSpecProvider) -> BackendSpecProvider:
    """The spec provider for ``backend``: a provider instance as is, a name (te, torch, auto) via the backends.

    Applies :mod:`megatron.oellm.patches.recompute_without_te` (idempotent, only where Transformer Engine does not
    import), so the layers of every model built here can recompute their norms without TE."""
    recompute_without_te.apply()
    if not isinstance(backend, str):
        return backend
    from megatron.oellm.backends import backend_spec_provider

    return backend_spec_provider(backend)


def language_model_kwargs(card: ModelCard, pre_process: bool, post_process: bool,
                          vp_stage: int | None) -> dict[str, Any]:
    """Constructor arguments ``GPTModel`` and ``HybridModel`` share: vocabulary, RoPE, tied embeddings, stage role."""
    return dict(
        vocab_size=card.vocab_size,
        max_sequence_length=card.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=not card.untie_embeddings,
        position_embedding_type="rope",
        rotary_percent=card.rotary_percent,
        rotary_base=int(card.rotary_base),
        vp_stage=vp_stage,
    )


def check_backend(backend: str | BackendSpecProvider, config: TransformerConfig) -> None:
    """Reject, before allocation, a config that the named backend cannot run (a provider instance is trusted)."""
    if isinstance(backend, str):
        from megatron.oellm.backends import check_config_support

        check_config_support(backend, config)


def norm_and_input_linear(backend: BackendSpecProvider) -> tuple[Any, Any]:
    """(pre-norm, input linear) of a mixer: the fused norm+linear module where the backend has one, else a norm."""
    fused = backend.column_parallel_layer_norm_linear() if backend.fuse_layernorm_and_linear() else None
    if fused is not None:
        return IdentityOp, fused
    return backend.layer_norm(rms_norm=True), backend.column_parallel_linear()


def attention_spec(backend: BackendSpecProvider, card: ModelCard) -> ModuleSpec:
    """Causal ``SelfAttention`` (GQA; QK RMSNorm and the sigmoid output gate come from the config) on ``backend``."""
    _, linear_qkv = norm_and_input_linear(backend)
    qk_norm = backend.layer_norm(rms_norm=True, for_qk=True) if card.qk_layernorm else IdentityOp
    return ModuleSpec(
        module=SelfAttention,
        params={"attn_mask_type": AttnMaskType.causal},
        submodules=SelfAttentionSubmodules(
            linear_qkv=linear_qkv,
            core_attention=backend.core_attention(),
            linear_proj=backend.row_parallel_linear(),
            q_layernorm=qk_norm,
            k_layernorm=qk_norm,
        ),
    )


def moe_builder(backend: BackendSpecProvider, card: ModelCard) -> MlpBuilder:
    """``MoELayer`` with grouped routed experts and (per the config) a gated shared expert, on ``backend``; the
    router is the backend's ``moe_router()`` where it has one (megatron-core's providers do not: ``TopKRouter``).

    Applies :mod:`megatron.oellm.patches.moe_permutation` (unfused token permutation without atomic adds; idempotent,
    0.19.2 only, ``OELLM_UPSTREAM_MOE_PERMUTATION=1`` opts out), so the MoE models built here run it wherever
    megatron-core's unfused permutation would run."""
    moe_permutation.apply()
    builder = get_moe_module_spec_for_backend(backend=backend, num_experts=card.num_experts, moe_grouped_gemm=True)
    router = getattr(backend, "moe_router", None)
    if router is None:
        return builder
    return functools.partial(builder, submodules=dataclasses.replace(builder.keywords["submodules"], router=router()))


SPEC_RUNTIME_DEFAULTS: dict[str, Any] = dict(
    hidden_dropout=0.0,
    attention_dropout=0.0,
    bias_activation_fusion=False,
    apply_rope_fusion=False,
    moe_router_dtype="fp32",
    moe_token_dispatcher_type="alltoall",
    cuda_graph_modules=[],
)
"""Runtime settings of a config built from a card alone (tests, bench); a training run takes them from Megatron's
arguments instead (:mod:`megatron.oellm.training.model_provider`). ``cuda_graph_modules=[]`` is what megatron-core
0.19.2's default ``"full"`` becomes (a graph captures the whole layer), without the deprecation warning that default
gives on every config."""


def check_family(card: ModelCard, family: str, linear_mixer: str) -> None:
    """Raise ``ValueError`` unless ``card`` belongs to ``family`` with ``linear_mixer`` (``"none"``: attention only)."""
    if card.family != family or card.linear_mixer != linear_mixer:
        raise ValueError(f"{card.name} is not a {family} card with linear_mixer={linear_mixer!r} "
                         f"(family={card.family!r}, linear_mixer={card.linear_mixer!r}); use the spec builder of "
                         "its family")


def config_with_runtime_defaults(card_kwargs: dict[str, Any], overrides: dict[str, Any]) -> TransformerConfig:
    """``TransformerConfig`` of a family's card fields over :data:`SPEC_RUNTIME_DEFAULTS`; ``overrides`` win.

    Raises ``ValueError`` where selective recompute names a module the model lacks (:func:`absent_recompute_modules`),
    for the MoE settings :func:`moe_setting_problems` names and for the settings the spec builders do not build
    (:func:`unbuilt_setting_problems`).
    """
    config = TransformerConfig(**{**SPEC_RUNTIME_DEFAULTS, **card_kwargs, **overrides})
    problems = [f"recompute_modules {name!r}: {why}" for name, why in absent_recompute_modules(config).items()]
    problems += moe_setting_problems(config)
    problems += unbuilt_setting_problems(config)
    if problems:
        raise ValueError("; ".join(problems))
    return config


def moe_setting_problems(config: TransformerConfig) -> list[str]:
    """Why each MoE setting of ``config`` that megatron-core's ``TransformerConfig`` accepts fails or does nothing
    once the model runs, with the fix:

    - routing probabilities applied on the experts' input of more than one expert per token, which both backends'
      grouped experts refuse only once the model is built or running (TEGroupedMLP asserts at the first step);
    - the shared expert's overlap in a model without a shared expert (megatron-core ignores it);
    - inputs padded to an expert capacity above the tokens routed (``moe_router_topk`` x capacity factor > experts)
      in the all-to-all dispatcher: its router then keeps every token while the dispatcher pads to the larger
      capacity, and the permutation fails at the first step.
    """
    problems = []
    if config.moe_apply_probs_on_input and config.moe_router_topk != 1:
        problems.append(f"moe_apply_probs_on_input scales each expert's input by its routing probability, which "
                        f"megatron-core's experts do for one expert per token only, and this model routes each "
                        f"token to moe_router_topk={config.moe_router_topk}; drop --moe-apply-probs-on-input")
    if config.moe_shared_expert_overlap and not config.moe_shared_expert_intermediate_size:
        problems.append("moe_shared_expert_overlap overlaps the shared expert with the token dispatch, and this model "
                        "has no shared expert, so megatron-core ignores it; drop --moe-shared-expert-overlap")
    factor = config.moe_expert_capacity_factor
    if (config.moe_pad_expert_input_to_capacity and factor is not None and config.num_moe_experts
            and config.moe_token_dispatcher_type == "alltoall"
            and config.moe_router_topk * factor > config.num_moe_experts):
        problems.append(f"moe_pad_expert_input_to_capacity with moe_expert_capacity_factor={factor:g}: each expert's "
                        f"capacity ({config.moe_router_topk} experts per token x {factor:g} / "
                        f"{config.num_moe_experts} experts) exceeds the tokens, and megatron-core's all-to-all "
                        "dispatcher then fails in its permutation at the first step; give "
                        f"--moe-expert-capacity-factor at most {config.num_moe_experts / config.moe_router_topk:g}")
    return problems


def unbuilt_setting_problems(config: TransformerConfig) -> list[str]:
    """Why each setting of ``config`` that megatron-core's ``TransformerConfig`` accepts and the spec builders' specs
    leave out is refused, with the fix: a model built from them would run without it (or fail at its first step, on
    the GPU), while a benchmark or test reported it as the model asked for.

    - ``mtp_num_layers``: the specs have no multi-token-prediction block, and megatron-core's ``GPTModel`` still
      splits the hidden states for its loss, failing at the first forward with labels;
    - ``qk_l2_norm``: the specs put the card's RMSNorm in the query and key norm slots, which megatron-core's attention
      uses in place of its L2 norm;
    - ``moe_layer_freq`` other than an MoE block in every layer: the specs build every layer's MLP as an MoE block.
    """
    problems = []
    if config.mtp_num_layers:
        problems.append(f"mtp_num_layers={config.mtp_num_layers}: the spec builders build no multi-token prediction "
                        "block, and megatron-core's GPTModel would fail at its first forward with labels; drop it")
    if config.qk_l2_norm:
        problems.append("qk_l2_norm: the spec builders put the card's RMSNorm in the query and key norm slots, which "
                        "megatron-core's attention uses instead of its L2 norm; drop it")
    if not every_layer_moe(config.moe_layer_freq):
        problems.append(f"moe_layer_freq={config.moe_layer_freq!r}: the spec builders put an MoE block in every "
                        "layer (no card has dense layers between them); drop it")
    return problems


def absent_recompute_modules(config: TransformerConfig) -> dict[str, str]:
    """Module -> why, for each selective-recompute module the spec builders' models do not have, with the fix.

    megatron-core skips such a module silently (``mlp`` recomputes dense MLPs only, ``shared_experts`` a shared
    expert), so a run asking for it would train without the memory saving it was sized for. Every layer the spec
    builders build with experts is an MoE block."""
    if config.recompute_granularity != "selective":
        return {}
    modules = set(config.recompute_modules or ())
    absent = {}
    if "mlp" in modules and config.num_moe_experts:
        absent["mlp"] = ("every layer's MLP is an MoE block, and megatron-core recomputes dense MLPs only; use 'moe' "
                         "(the whole MoE block) or 'moe_act' (the experts' activation) in --recompute-modules")
    if "shared_experts" in modules and not config.moe_shared_expert_intermediate_size:
        absent["shared_experts"] = "the model has no shared expert; remove it from --recompute-modules"
    return absent


def common_config_kwargs(card: ModelCard, layout: ParallelLayout, params_dtype: torch.dtype) -> dict[str, Any]:
    """TransformerConfig fields every family derives from the card and layout: shapes, norms, attention, MoE,
    parallel sizes, dtype. Runtime settings are not among them (see :data:`SPEC_RUNTIME_DEFAULTS`).

    The card's router fields carry megatron-core's semantics (``moe_router_pre_softmax=False``: top-k on the logits,
    softmax over the chosen k, which equals the Qwen routers' softmax -> top-k -> renormalise).
    """
    validate_layout(card, layout)
    return dict(
        hidden_size=card.hidden_size,
        num_attention_heads=card.num_attention_heads,
        num_query_groups=card.num_query_groups,
        kv_channels=card.kv_channels,
        ffn_hidden_size=card.moe_ffn_hidden_size,
        normalization="RMSNorm",
        layernorm_epsilon=card.norm_epsilon,
        layernorm_zero_centered_gamma=card.zero_centered_norm,
        qk_layernorm=card.qk_layernorm,
        attention_output_gate=card.attention_output_gate,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        num_moe_experts=card.num_experts,
        moe_ffn_hidden_size=card.moe_ffn_hidden_size,
        moe_router_topk=card.moe_router_topk,
        moe_router_pre_softmax=card.moe_router_pre_softmax,
        moe_router_load_balancing_type=card.moe_router_load_balancing_type,
        moe_aux_loss_coeff=card.moe_aux_loss_coeff,
        moe_shared_expert_intermediate_size=card.moe_shared_expert_intermediate_size or None,
        moe_shared_expert_gate=card.moe_shared_expert_gate,
        moe_grouped_gemm=True,
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.etp,
        context_parallel_size=layout.cp,
        sequence_parallel=layout.sp,
        params_dtype=params_dtype,
        pipeline_dtype=params_dtype,
        bf16=params_dtype == torch.bfloat16,
        fp16=params_dtype == torch.float16,
    )
