"""Shared setup of the backend tests: a small SwiGLU-MoE TransformerConfig, the experts the provider builds, process
group stand-ins and FSDP2-style expert weights."""

import torch
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


def random_cpu_experts(experts: int, hidden: int, ffn: int, *, grouped: bool = True, gated: bool = True):
    """Experts as the torch-native provider builds them (SwiGLU when ``gated``), fp32 on CPU in megatron's parallel
    state (a gloo world must be up), with fresh random weights."""
    config = moe_config(hidden, 4, experts, ffn, moe_grouped_gemm=grouped, gated_linear_unit=gated,
                        use_cpu_initialization=True)
    built = build_experts(config, grouped, ProcessGroupCollection.use_mpu_process_groups())
    with torch.no_grad():
        for parameter in built.parameters():
            parameter.normal_()
    return built


class GroupStandIn:
    """A process-group stand-in of a given rank and size (what megatron's ``get_pg_rank`` / ``get_pg_size`` read):
    plays another rank's group inside a world of one."""

    def __init__(self, rank: int, size: int):
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def as_fsdp2_parameters(experts: torch.nn.Module) -> torch.nn.Module:
    """``experts`` with their stacked weights replaced by FSDP2-style parameters: DTensors sharded on the expert axis
    of a one-rank CPU mesh (a gloo world must be up), fresh random values, marked as megatron-core marks FSDP2's
    parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    for projection in (experts.linear_fc1, experts.linear_fc2):
        weight = torch.nn.Parameter(distribute_tensor(torch.randn_like(projection.weight), mesh, [Shard(0)]))
        weight.is_torch_fsdp2_param = True
        projection.weight = weight
    return experts
