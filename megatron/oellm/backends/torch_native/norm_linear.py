"""RMSNorm fused in front of a column-parallel linear: the torch-native stand-in for TELayerNormColumnParallelLinear."""

from collections.abc import Callable

import torch
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.backends.torch_native.norms import make_norm_weight, require_rms_norm, rms_norm


class RMSNormColumnParallelLinear(ColumnParallelLinear):
    """RMSNorm over the input's last dimension, then megatron-core's ColumnParallelLinear.

    Constructor and ``forward(x) -> (output, bias)`` follow TELayerNormColumnParallelLinear, and so does the state
    dict: ``weight`` (``[output_size / tp, input_size]``, TP-sharded on axis 0), ``bias`` if any, the norm gamma
    ``layer_norm_weight`` (replicated) and ``_extra_state``. A checkpoint therefore moves between this backend and
    Transformer Engine's unchanged. Tensor and sequence parallelism come from ColumnParallelLinear: the norm runs
    on the local token shard, the linear all-gathers it when ``config.sequence_parallel`` is on.
    """

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config: TransformerConfig,
        init_method: Callable,
        gather_output: bool,
        bias: bool,
        skip_bias_add: bool,
        is_expert: bool,
        skip_weight_param_allocation: bool = False,
        tp_comm_buffer_name: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        stride: int = 1,
        name: str | None = None,
    ):
        require_rms_norm(config)
        super().__init__(
            input_size,
            output_size,
            config=config,
            init_method=init_method,
            bias=bias,
            gather_output=gather_output,
            stride=stride,
            skip_bias_add=skip_bias_add,
            skip_weight_param_allocation=skip_weight_param_allocation,
            is_expert=is_expert,
            tp_comm_buffer_name=tp_comm_buffer_name,
            tp_group=tp_group,
            name=name,
        )
        self.layer_norm_eps = config.layernorm_epsilon
        self.zero_centered_gamma = config.layernorm_zero_centered_gamma
        self.layer_norm_weight = make_norm_weight(config, input_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return ``(linear(rms_norm(x)), bias or None)`` like ColumnParallelLinear. An input in another dtype than the
        weights (megatron-core's fp32 residual stream under ``fp32_residual_connection``) is cast to theirs first, as
        TELayerNormColumnParallelLinear does."""
        x = x.to(self.layer_norm_weight.dtype)
        normed = rms_norm(x, self.layer_norm_weight, self.layer_norm_eps, self.zero_centered_gamma)
        return super().forward(normed)
