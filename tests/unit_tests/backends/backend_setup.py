"""Shared setup of the backend tests: a small SwiGLU-MoE TransformerConfig and the experts the provider builds."""

import torch.nn.functional as F
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends.torch_native import TorchNativeSpecProvider


def moe_config(hidden: int, heads: int, experts: int, ffn: int, **overrides) -> TransformerConfig:
    """One layer, GQA with 2 groups, RMSNorm, SwiGLU grouped-GEMM experts, no biases, no dropout; ``overrides`` win."""
    fields = dict(
        num_layers=1, hidden_size=hidden, num_attention_heads=heads, num_query_groups=2, num_moe_experts=experts,
        moe_ffn_hidden_size=ffn, moe_grouped_gemm=True, gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, normalization="RMSNorm", attention_dropout=0.0, hidden_dropout=0.0,
    )
    return TransformerConfig(**{**fields, **overrides})


def build_experts(config: TransformerConfig, grouped: bool = True, pg_collection: ProcessGroupCollection | None = None):
    """Experts as the torch-native provider builds them for an MoE layer (``pg_collection`` None: world of one)."""
    builder = TorchNativeSpecProvider().grouped_mlp_modules(grouped)
    return builder(config.num_moe_experts, config, pg_collection=pg_collection)
