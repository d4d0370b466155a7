"""RMSNorm for the torch-native backend: fp32 compute, optional zero-centred gamma, TE-compatible state dict.

The arithmetic is :func:`megatron.oellm.layers.rms_norm.rms_norm` (Triton kernels on the GPU)."""

from typing import Any

import torch
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.oellm.layers.rms_norm import rms_norm


def make_norm_weight(config: TransformerConfig, hidden_size: int) -> torch.nn.Parameter:
    """Allocate a norm gamma of ``hidden_size`` initialised to the identity scale (0 if zero-centred, else 1).

    Placed on CPU with ``config.use_cpu_initialization``, else on the current CUDA device, in
    ``config.params_dtype``. Marked ``sequence_parallel`` like TE's norms, so megatron all-reduces its gradient
    across the tensor-parallel group when sequence parallelism splits the tokens.
    """
    device = "cpu" if config.use_cpu_initialization else torch.cuda.current_device()
    init = torch.zeros if config.layernorm_zero_centered_gamma else torch.ones
    weight = torch.nn.Parameter(init(hidden_size, dtype=config.params_dtype, device=device))
    weight.sequence_parallel = config.sequence_parallel
    return weight


def require_rms_norm(config: TransformerConfig) -> None:
    """Raise ValueError unless ``config.normalization`` is RMSNorm, the only norm this backend implements."""
    if config.normalization != "RMSNorm":
        raise ValueError(
            f"the torch-native backend implements RMSNorm only, got normalization={config.normalization!r}; "
            "set normalization='RMSNorm' or use the Transformer Engine backend (--oellm-backend te)"
        )


class RMSNorm(torch.nn.Module):
    """RMSNorm module built like megatron's norms (``config``, ``hidden_size``, ``eps``); state keys ``weight`` and
    ``_extra_state``.

    The state dict is Transformer Engine's RMSNorm's: ``weight`` (zero-centred semantics from
    ``config.layernorm_zero_centered_gamma``) and the extra state TE's norm has without FP8 (an empty uint8 tensor),
    which megatron-core saves as a checkpoint object of its own: a TE model asks for it when it loads a checkpoint.
    No residual fusion is done here, so a config asking for ``fused_residual_rmsnorm`` is rejected.
    """

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        require_rms_norm(config)
        if config.fused_residual_rmsnorm:
            raise ValueError(
                "fused_residual_rmsnorm is not implemented by the torch-native backend; "
                "set fused_residual_rmsnorm=False or use the Transformer Engine backend (--oellm-backend te)"
            )
        self.config = config
        self.eps = eps
        self.zero_centered_gamma = config.layernorm_zero_centered_gamma
        self.weight = make_norm_weight(config, hidden_size)

    def get_extra_state(self) -> torch.Tensor:
        """An empty uint8 tensor, the extra state of Transformer Engine's RMSNorm without FP8: megatron-core saves it
        under the key a TE model loads (``...norm._extra_state``), so checkpoints move between the backends."""
        return torch.empty(0, dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        """Ignore a loaded extra state: this norm has no FP8 metadata, and TE's (FP8 runs) has no meaning here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return RMSNorm(x) over the last dimension, in the weight's dtype: an input in another dtype (megatron-core's
        fp32 residual stream under ``fp32_residual_connection``) is cast to it first, as Transformer Engine's norms
        do."""
        return rms_norm(x.to(self.weight.dtype), self.weight, self.eps, self.zero_centered_gamma)
