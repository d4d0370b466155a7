"""RMSNorm for the torch-native backend: fp32 compute, optional zero-centred gamma, TE-compatible parameter names.

The arithmetic is :func:`megatron.oellm.layers.rms_norm.rms_norm` (Triton kernels on the GPU)."""

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
    """RMSNorm module built like megatron's norms (``config``, ``hidden_size``, ``eps``); state key ``weight``.

    Matches TE's RMSNorm state dict (``weight``; zero-centred semantics from
    ``config.layernorm_zero_centered_gamma``). No residual fusion is done here, so a config asking for
    ``fused_residual_rmsnorm`` is rejected.
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return RMSNorm(x) over the last dimension, in the weight's dtype: an input in another dtype (megatron-core's
        fp32 residual stream under ``fp32_residual_connection``) is cast to it first, as Transformer Engine's norms
        do."""
        return rms_norm(x.to(self.weight.dtype), self.weight, self.eps, self.zero_centered_gamma)
