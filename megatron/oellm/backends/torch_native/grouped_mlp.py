"""Grouped-expert MLP on ``torch._grouped_mm``: one stacked weight per projection, TEGroupedMLP's checkpoint layout.

The expert weights live in one ``[num_local_experts, out, in]`` parameter per projection (what the grouped GEMM
wants), while ``state_dict`` and ``sharded_state_dict`` present TE's per-expert names ``weight0 .. weight{E-1}``
with the same TP/EP sharding as TEGroupedMLP (interchangeable with SequentialMLP's), so checkpoints and the HF
converter serve both backends.
"""

from collections.abc import Callable
from typing import Any

import torch
from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedStateDict
from megatron.core.dist_checkpointing.utils import replace_prefix_for_sharding
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
from megatron.core.tensor_parallel.random import get_cuda_rng_tracker, get_expert_parallel_rng_tracker_name
from megatron.core.transformer.mlp import apply_swiglu_sharded_factory
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.moe.experts import GroupedMLPSubmodules
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.utils import (
    ensure_metadata_has_dp_cp_group,
    make_sharded_tensors_for_checkpoint,
    sharded_state_dict_default,
)
from megatron.core.utils import divide, get_pg_rank, get_pg_size


def grouped_matmul(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows ``offsets[e-1]:offsets[e]`` of ``x`` times ``weight[e].T`` for every expert e, in one grouped GEMM.

    ``x`` is ``[tokens, in]`` sorted by expert, ``weight`` is ``[experts, out, in]`` and ``offsets`` the int32
    cumulative token counts on ``x``'s device. ``weight.transpose(-2, -1)`` is the column-major ``[E, in, out]``
    operand ``torch._grouped_mm`` expects, so no copy is made. bf16 and fp32 both run on it (fp32 checked on
    H200 with torch 2.11; CPU has torch's own fallback), so no per-expert loop is needed; empty groups are fine.
    """
    return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)


class StackedGroupedLinear(torch.nn.Module):
    """The linears of all local experts as one ``weight`` of shape ``[experts, out_per_partition, in_per_partition]``.

    Built with TE grouped-linear arguments (``GroupedLinearFc1Builder``); the expert-TP split is along the output
    (``parallel_mode='column'``) or input (``'row'``) features, with no communication (the token dispatcher does
    it). ``state_dict`` shows ``weight{i}`` and ``_extra_state`` like TE's GroupedLinear; loading accepts them.
    """

    def __init__(
        self,
        num_local_experts: int,
        input_size: int,
        output_size: int,
        *,
        parallel_mode: str,
        config: TransformerConfig,
        init_method: Callable[[torch.Tensor], None],
        bias: bool,
        skip_bias_add: bool,
        is_expert: bool,
        tp_comm_buffer_name: str | None,
        pg_collection: ProcessGroupCollection | None,
        name: str | None = None,
    ):
        super().__init__()
        if bias:
            raise ValueError(
                "the torch-native grouped experts have no bias; set add_bias_linear=False "
                "or use the Transformer Engine backend (--backend te)"
            )
        if not is_expert:
            raise ValueError("StackedGroupedLinear holds MoE experts; build it with is_expert=True")
        self.num_local_experts = num_local_experts
        self.parallel_mode = parallel_mode
        self.config = config
        self.ep_group = pg_collection.ep if pg_collection is not None else None
        self.tp_group = pg_collection.expt_tp if pg_collection is not None else None
        self.expt_dp_group = pg_collection.expt_dp if pg_collection is not None else None
        self.expt_dp_object_group = getattr(pg_collection, "expt_dp_gtp_remat", self.expt_dp_group)
        tp_size = get_pg_size(self.tp_group)
        if parallel_mode == "column":
            out_features, in_features, self.tp_axis = divide(output_size, tp_size), input_size, 0
        elif parallel_mode == "row":
            out_features, in_features, self.tp_axis = output_size, divide(input_size, tp_size), 1
        else:
            raise ValueError(f"parallel_mode must be 'column' or 'row', got {parallel_mode!r}")
        device = "cpu" if config.use_cpu_initialization else torch.cuda.current_device()
        self.weight = torch.nn.Parameter(
            torch.empty(num_local_experts, out_features, in_features, dtype=config.params_dtype, device=device)
        )
        set_tensor_model_parallel_attributes(self.weight, is_parallel=True, dim=self.tp_axis + 1, stride=1)
        use_expert_groups = config.expert_model_parallel_size > 1 or (
            config.expert_tensor_parallel_size != config.tensor_model_parallel_size
        )
        self.weight.allreduce = not use_expert_groups
        if config.perform_initialization:
            self._initialize(init_method)
        self._register_state_dict_hook(_split_stacked_weight)
        self._register_load_state_dict_pre_hook(_stack_expert_weights, with_module=True)

    @torch.no_grad()
    def _initialize(self, init_method: Callable[[torch.Tensor], None]) -> None:
        """Initialise each expert's matrix with ``init_method``, on the expert RNG stream when on GPU."""
        if self.weight.is_cuda:
            with get_cuda_rng_tracker().fork(get_expert_parallel_rng_tracker_name()):
                for expert in self.weight:
                    init_method(expert)
        else:
            for expert in self.weight:
                init_method(expert)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Grouped GEMM of expert-sorted ``x`` (``[tokens, in]``) with int32 cumulative ``offsets`` per expert."""
        return grouped_matmul(x, self.weight, offsets)

    def get_extra_state(self) -> None:
        """No extra state; the ``_extra_state`` key exists to match TE's state dict."""
        return None

    def set_extra_state(self, state: Any) -> None:
        """TE's extra state (fp8 metadata) has no meaning here and is ignored."""

    def backward_dw(self) -> None:
        """Weight gradients are computed in the ordinary backward pass; nothing is deferred."""

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> ShardedStateDict:
        """Per-expert ShardedTensors keyed ``{prefix}weight{i}`` / ``{prefix}_extra_state{i or ''}``, like TE's.

        Each local expert gets the global-expert axis ``(len(sharded_offsets), ep_rank * E + i, ep_size * E)``
        prepended (or, with ``singleton_local_shards``, its own ``{global_expert}.`` key prefix), the TP axis
        0 (column) / 1 (row), and an expert-data-parallel replica id.
        """
        metadata = ensure_metadata_has_dp_cp_group(metadata)
        singleton_local_shards = metadata.get("singleton_local_shards", False)
        num_global_experts = get_pg_size(self.ep_group) * self.num_local_experts
        first_global_expert = get_pg_rank(self.ep_group) * self.num_local_experts
        ep_axis = len(sharded_offsets)
        sharded: ShardedStateDict = {}
        for i in range(self.num_local_experts):
            global_expert = first_global_expert + i
            if singleton_local_shards:
                expert_prefix, expert_offsets = f"{global_expert}.{prefix}", sharded_offsets
            else:
                expert_prefix = prefix
                expert_offsets = (*sharded_offsets, (ep_axis, global_expert, num_global_experts))
            local = {f"{i}.weight": self.weight[i], f"{i}._extra_state": self.get_extra_state()}
            sub = make_sharded_tensors_for_checkpoint(
                local,
                "",
                {f"{i}.weight": self.tp_axis},
                expert_offsets,
                tp_group=self.tp_group,
                dp_cp_group=metadata["dp_cp_group"],
            )
            replace_prefix_for_sharding(sub, f"{i}.", expert_prefix)
            sharded[f"{prefix}weight{i}"] = sub[f"{i}.weight"]
            sharded[f"{prefix}_extra_state{'' if i == 0 else i}"] = sub[f"{i}._extra_state"]
        for entry in sharded.values():
            if getattr(entry, "is_data_parallel_fully_shard", False):
                dp_replica = 0
            elif isinstance(entry, ShardedObject):
                dp_replica = get_pg_rank(self.expt_dp_object_group)
            else:
                dp_replica = get_pg_rank(self.expt_dp_group)
            entry.replica_id = (*entry.replica_id[:2], dp_replica)
        return sharded


def _split_stacked_weight(
    module: StackedGroupedLinear, state_dict: dict[str, Any], prefix: str, local_metadata: dict
) -> None:
    """State-dict hook: replace ``{prefix}weight`` by TE's per-expert ``{prefix}weight0 .. weight{E-1}`` views."""
    stacked = state_dict.pop(f"{prefix}weight")
    for i in range(module.num_local_experts):
        state_dict[f"{prefix}weight{i}"] = stacked[i]


def _stack_expert_weights(
    module: StackedGroupedLinear, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Load pre-hook: stack TE-style ``{prefix}weight{i}`` entries back into the one ``{prefix}weight``."""
    names = [f"{prefix}weight{i}" for i in range(module.num_local_experts)]
    if all(name in state_dict for name in names):
        state_dict[f"{prefix}weight"] = torch.stack([state_dict.pop(name) for name in names])


class ColumnParallelStackedGroupedLinear(StackedGroupedLinear):
    """Experts' first projection (``linear_fc1``): output features split over the expert-TP group."""

    def __init__(self, num_local_experts: int, input_size: int, output_size: int, **kwargs: Any):
        super().__init__(num_local_experts, input_size, output_size, parallel_mode="column", **kwargs)


class RowParallelStackedGroupedLinear(StackedGroupedLinear):
    """Experts' second projection (``linear_fc2``): input features split over the expert-TP group."""

    def __init__(self, num_local_experts: int, input_size: int, output_size: int, **kwargs: Any):
        super().__init__(num_local_experts, input_size, output_size, parallel_mode="row", **kwargs)


class TorchGroupedMLP(MegatronModule):
    """MoE experts (``ExpertsBuilder``) computing all local experts with two grouped GEMMs and no host sync.

    ``forward(hidden [tokens, hidden] sorted by expert, tokens_per_expert [E], probs [tokens])`` returns
    ``(output [tokens, hidden], None)`` like TEGroupedMLP: fc1, (gated) activation, routing probabilities
    multiplied in after the activation (or on the input with ``config.moe_apply_probs_on_input``), fc2. Expert
    offsets are ``cumsum(tokens_per_expert)`` computed on the GPU as int32, so a step never waits on the host.
    Submodules ``linear_fc1``/``linear_fc2`` and the (sharded) state dict match TEGroupedMLP's.
    """

    def __init__(
        self,
        num_local_experts: int,
        config: TransformerConfig,
        submodules: GroupedMLPSubmodules,
        pg_collection: ProcessGroupCollection | None = None,
        name: str | None = None,
    ):
        super().__init__(config=config)
        if config.moe_mlp_glu_interleave_size is not None:
            raise ValueError("the torch-native grouped experts do not support moe_mlp_glu_interleave_size; unset it")
        if config.moe_latent_size is not None:
            raise ValueError("the torch-native grouped experts do not support moe_latent_size; unset it")
        self.num_local_experts = num_local_experts
        self.ep_group = pg_collection.ep if pg_collection is not None else None
        self.tp_group = pg_collection.expt_tp if pg_collection is not None else None
        ffn_hidden_size = config.moe_ffn_hidden_size
        common = dict(
            config=config,
            bias=config.add_bias_linear,
            is_expert=True,
            pg_collection=pg_collection,
        )
        self.linear_fc1 = submodules.linear_fc1(
            num_local_experts,
            config.hidden_size,
            2 * ffn_hidden_size if config.gated_linear_unit else ffn_hidden_size,
            init_method=config.init_method,
            skip_bias_add=False,
            tp_comm_buffer_name="fc1",
            name=f"{name}.linear_fc1" if name is not None else None,
            **common,
        )
        self.linear_fc2 = submodules.linear_fc2(
            num_local_experts,
            ffn_hidden_size,
            config.hidden_size,
            init_method=config.output_layer_init_method,
            skip_bias_add=True,
            tp_comm_buffer_name="fc2",
            name=f"{name}.linear_fc2" if name is not None else None,
            **common,
        )

    def activation(self, fc1_out: torch.Tensor) -> torch.Tensor:
        """``act(gate) * (linear + glu_linear_offset)`` for gated units (halves of fc1's output), else ``act(x)``.

        Honours ``config.activation_func_clamp_value`` like megatron's experts (gate clamped above, linear
        half clamped to +-value).
        """
        act = self.config.activation_func
        if not self.config.gated_linear_unit:
            return act(fc1_out)
        gate, linear = torch.chunk(fc1_out, 2, dim=-1)
        clamp = self.config.activation_func_clamp_value
        if clamp is not None:
            gate = gate.clamp(max=clamp)
            linear = linear.clamp(min=-clamp, max=clamp)
        return act(gate) * (linear + self.config.glu_linear_offset)

    def forward(
        self, hidden: torch.Tensor, tokens_per_expert: torch.Tensor, permuted_probs: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        """Run every local expert on its contiguous block of ``hidden``; see the class docstring."""
        offsets = torch.cumsum(tokens_per_expert.to(device=hidden.device, non_blocking=True), dim=0)
        offsets = offsets.to(torch.int32)
        probs = permuted_probs.unsqueeze(-1)
        if self.config.moe_apply_probs_on_input:
            if self.config.moe_router_topk != 1:
                raise ValueError("moe_apply_probs_on_input only works with moe_router_topk=1")
            hidden = (probs * hidden).to(hidden.dtype)
            probs = None
        intermediate = self.activation(self.linear_fc1(hidden, offsets))
        if probs is not None:
            intermediate = (intermediate * probs).to(intermediate.dtype)
        return self.linear_fc2(intermediate, offsets), None

    def backward_dw(self) -> None:
        """Weight gradients are not deferred by this module; nothing to do."""

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> ShardedStateDict:
        """TEGroupedMLP's sharded layout: keys ``{prefix}linear_fc{1,2}.weight{i}``, checkpoint names under
        ``{prefix}experts.linear_fc{1,2}.``, gated fc1 weights split into their two halves for TP resharding."""
        metadata = ensure_metadata_has_dp_cp_group(metadata)
        singleton_local_shards = metadata.get("singleton_local_shards", False)
        num_global_experts = get_pg_size(self.ep_group) * self.num_local_experts
        first_global_expert = get_pg_rank(self.ep_group) * self.num_local_experts
        sharded: ShardedStateDict = {}
        for name, module in self._modules.items():
            sub = sharded_state_dict_default(module, f"{name}.", sharded_offsets, metadata, tp_group=self.tp_group)
            if name == "linear_fc1" and self.config.gated_linear_unit:
                for i in range(self.num_local_experts):
                    expert_offsets = (
                        sharded_offsets
                        if singleton_local_shards
                        else (*sharded_offsets, (len(sharded_offsets), first_global_expert + i, num_global_experts))
                    )
                    key = f"{name}.weight{i}"
                    sub[key] = apply_swiglu_sharded_factory(
                        sub[key],
                        expert_offsets,
                        singleton_local_shards,
                        tp_group=self.tp_group,
                        dp_group=metadata["dp_cp_group"],
                    )
            if singleton_local_shards:
                replace_prefix_for_sharding(sub, "", f"{prefix}experts.")
            else:
                replace_prefix_for_sharding(sub, f"{name}.", f"{prefix}experts.{name}.")
            sharded.update({f"{prefix}{k}": v for k, v in sub.items()})
        return sharded
