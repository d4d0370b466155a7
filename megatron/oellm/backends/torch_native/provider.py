"""megatron-core BackendSpecProvider for the torch-native backend (no Transformer Engine)."""

from functools import partial

from megatron.core.models.backends import BackendSpecProvider
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.mlp import MLPSubmodules, TEActivationFunctionBuilder
from megatron.core.transformer.moe.experts import GroupedMLPSubmodules, SequentialMLP
from megatron.core.transformer.moe.moe_layer import ExpertsBuilder
from megatron.core.transformer.torch_norm import LayerNormBuilder

from megatron.oellm.backends.torch_native.attention import SDPACoreAttention
from megatron.oellm.backends.torch_native.grouped_mlp import (
    ColumnParallelStackedGroupedLinear,
    RowParallelStackedGroupedLinear,
    TorchGroupedMLP,
)
from megatron.oellm.backends.torch_native.norm_linear import RMSNormColumnParallelLinear
from megatron.oellm.backends.torch_native.norms import RMSNorm


class TorchNativeSpecProvider(BackendSpecProvider):
    """Spec submodules built from torch and megatron-core alone, with Transformer Engine's state-dict names.

    Parallel linears are megatron-core's (tensor and sequence parallelism included); the fused input-norm slots
    get :class:`RMSNormColumnParallelLinear`, core attention :class:`SDPACoreAttention`, grouped experts
    :class:`TorchGroupedMLP`, norms :class:`RMSNorm`. A checkpoint written with either backend loads in the other.
    """

    def column_parallel_linear(self) -> type:
        """megatron-core's ColumnParallelLinear (same ``weight``/``bias``/``_extra_state`` keys as TE's)."""
        return ColumnParallelLinear

    def row_parallel_linear(self) -> type:
        """megatron-core's RowParallelLinear."""
        return RowParallelLinear

    def fuse_layernorm_and_linear(self) -> bool:
        """True: input norms fold into the following linear (``layer_norm_weight``), as with TE."""
        return True

    def column_parallel_layer_norm_linear(self) -> type:
        """RMSNorm + ColumnParallelLinear in one module, keyed like TELayerNormColumnParallelLinear."""
        return RMSNormColumnParallelLinear

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, has_residual: bool = False) -> LayerNormBuilder:
        """RMSNorm with fp32 compute for every norm slot (``config.normalization`` must be RMSNorm).

        Residual fusion is not implemented, so ``has_residual`` changes nothing (RMSNorm rejects configs that
        ask for ``fused_residual_rmsnorm``).
        """
        return RMSNorm

    def core_attention(self) -> type:
        """SDPA / varlen flash attention core (causal, GQA, packed documents)."""
        return SDPACoreAttention

    def grouped_mlp_modules(self, moe_use_grouped_gemm: bool) -> ExpertsBuilder:
        """Grouped-GEMM experts on ``torch._grouped_mm``, or megatron's SequentialMLP without grouped GEMM."""
        if moe_use_grouped_gemm:
            return partial(
                TorchGroupedMLP,
                submodules=GroupedMLPSubmodules(
                    linear_fc1=ColumnParallelStackedGroupedLinear,
                    linear_fc2=RowParallelStackedGroupedLinear,
                ),
            )
        return partial(
            SequentialMLP,
            submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear),
        )

    def activation_func(self) -> TEActivationFunctionBuilder | None:
        """None: activations come from ``config.activation_func`` (no TE activation modules)."""
        return None
