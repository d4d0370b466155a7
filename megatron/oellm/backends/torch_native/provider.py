"""megatron-core BackendSpecProvider for the torch-native backend (no Transformer Engine)."""

from functools import partial

from megatron.core.models.backends import LocalSpecProvider
from megatron.core.transformer.moe.experts import GroupedMLPSubmodules
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
from megatron.oellm.backends.torch_native.router import TorchGatingTopKRouter


class TorchNativeSpecProvider(LocalSpecProvider):
    """Spec submodules built from torch and megatron-core alone, with Transformer Engine's state-dict names.

    megatron-core's local provider gives the parallel linears (tensor and sequence parallelism included), the
    activation slot and the experts without grouped GEMM (SequentialMLP); the fused input-norm slots
    get :class:`RMSNormColumnParallelLinear`, core attention :class:`SDPACoreAttention`, grouped experts
    :class:`TorchGroupedMLP`, norms :class:`RMSNorm`, the MoE router :class:`TorchGatingTopKRouter`. A distributed
    checkpoint written with either backend loads in the other under megatron's default strictness; one this backend
    wrote before its norms carried Transformer Engine's ``_extra_state`` needs ``--dist-ckpt-strictness
    log_unexpected`` (the training entry says so).
    """

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
        if not moe_use_grouped_gemm:
            return super().grouped_mlp_modules(moe_use_grouped_gemm)
        return partial(
            TorchGroupedMLP,
            submodules=GroupedMLPSubmodules(
                linear_fc1=ColumnParallelStackedGroupedLinear,
                linear_fc2=RowParallelStackedGroupedLinear,
            ),
        )

    def moe_router(self) -> type:
        """megatron-core's top-k router with its gating product computed by torch: megatron-core's own router would
        use Transformer Engine's GEMM (TF32 for fp32 operands) whenever TE is installed."""
        return TorchGatingTopKRouter
