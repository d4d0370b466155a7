"""Grouped-expert MLP on ``torch._grouped_mm``: one stacked weight per projection, TEGroupedMLP's checkpoint layout.

The expert weights live in one ``[num_local_experts, out, in]`` parameter per projection (what the grouped GEMM
wants). ``state_dict`` presents TE's per-expert names ``weight0 .. weight{E-1}`` (the HF converter's view), and
``sharded_state_dict`` one tensor per projection that describes the same global checkpoint tensor as TEGroupedMLP's
(and SequentialMLP's) per-expert shards, so distributed checkpoints load across backends and megatron-core's
optimizers can map their state to the parameter.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.dist_checkpointing.mapping import ShardedStateDict, ShardedTensor, ShardedTensorFactory
from megatron.core.dist_checkpointing.utils import replace_prefix_for_sharding
from megatron.core.fusions.fused_bias_swiglu import bias_swiglu_impl, weighted_bias_swiglu_impl
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.tensor_parallel.layers import _initialize_affine_weight_cpu, set_tensor_model_parallel_attributes
from megatron.core.tensor_parallel.random import (
    CheckpointWithoutOutput,
    get_cuda_rng_tracker,
    get_expert_parallel_rng_tracker_name,
)
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.moe.experts import GroupedMLPSubmodules
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.utils import (
    make_sharded_object_for_checkpoint,
)
from megatron.core.utils import divide, get_pg_rank, get_pg_size
from torch.distributed.tensor import DTensor, Shard


def uses_fused_swiglu(config: TransformerConfig) -> bool:
    """Whether the experts' activation runs megatron-core's fused SwiGLU, as TEGroupedMLP does with
    ``bias_activation_fusion``: a gated SiLU without ``activation_func_clamp_value`` (the fused kernel has no clamp,
    so a clamped activation keeps the eager path that honours it; other activations are eager too)."""
    return (config.bias_activation_fusion and config.gated_linear_unit and config.activation_func is F.silu
            and config.activation_func_clamp_value is None)


def grouped_matmul(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows ``offsets[e-1]:offsets[e]`` of ``x`` times ``weight[e].T`` for every expert e, in one grouped GEMM.

    ``x`` is ``[tokens, in]`` sorted by expert, ``weight`` is ``[experts, out, in]`` and ``offsets`` the int32
    cumulative token counts on ``x``'s device. ``weight.transpose(-2, -1)`` is the column-major ``[E, in, out]``
    operand ``torch._grouped_mm`` expects, so no copy is made. bf16 and fp32 both run on it (fp32 checked on
    H200 with torch 2.11; CPU has torch's own fallback), so no per-expert loop is needed; empty groups are fine.
    The gradient reaching the product is made dense first (:func:`dense_gradient`): torch's grouped GEMM backward
    refuses a broadcast one ("Invalid strides/sizes", e.g. from ``out.sum().backward()``); in a MoE layer the
    unpermutation already hands over a contiguous one, for which this is free.
    """
    out = torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
    if out.requires_grad:
        out.register_hook(dense_gradient)
    return out


def dense_gradient(grad: torch.Tensor) -> torch.Tensor:
    """``grad`` with row-major strides, for torch's grouped GEMM backward: ``contiguous`` for a broadcast gradient,
    and fresh zeros for an empty one (zero token rows), whose ``[0, 0]`` strides ``contiguous`` keeps, since torch
    counts every empty tensor as contiguous."""
    if grad.numel() == 0:
        return torch.zeros(grad.shape, dtype=grad.dtype, device=grad.device)
    return grad.contiguous()


def expert_end_offsets(tokens_per_expert: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Each local expert's end row among the permuted tokens (the running sum of ``tokens_per_expert``), as the int32
    offsets on ``device`` that :func:`grouped_matmul` takes.

    Counts on the GPU are summed there, without a host sync. Counts on the host come from dispatchers that have
    synchronised already; where each expert has the same count (drop-and-pad dispatch pads every expert to its
    capacity) the offsets are made on ``device`` from that one number instead of copied: CUDA graph capture forbids
    copies from pageable host memory, and drop-and-pad is the mode in which megatron-core captures MoE layers.
    """
    if tokens_per_expert.device.type == "cpu" and tokens_per_expert.numel():
        count = int(tokens_per_expert[0])
        if bool((tokens_per_expert == count).all()):
            experts = torch.arange(1, tokens_per_expert.numel() + 1, device=device, dtype=torch.int32)
            return experts * count
    return torch.cumsum(tokens_per_expert.to(device=device, non_blocking=True), dim=0).to(torch.int32)


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
                "or use the Transformer Engine backend (--oellm-backend te)"
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
        """Initialise each expert's matrix with ``init_method``: on the GPU its local shard on the expert RNG stream
        (which differs per expert-parallel and expert-TP rank); on the CPU (``use_cpu_initialization``) as
        megatron-core's CPU initialisation does, the whole matrix in fp32 on every rank, then this rank's expert-TP
        part of it, so expert-TP ranks hold different parts of one matrix, which is the same global checkpoint tensor
        for any expert-TP size."""
        if self.weight.is_cuda:
            with get_cuda_rng_tracker().fork(get_expert_parallel_rng_tracker_name()):
                for expert in self.weight:
                    init_method(expert)
        else:
            tp_size, tp_rank = get_pg_size(self.tp_group), get_pg_rank(self.tp_group)
            full = list(self.weight.shape[1:])
            full[self.tp_axis] *= tp_size
            # a gated fc1 holds this rank's part of each half (the layout of :func:`stacked_swiglu_factory`): stride 2
            stride = 2 if self.tp_axis == 0 and self.config.gated_linear_unit else 1
            for expert in self.weight:
                _initialize_affine_weight_cpu(
                    expert, full[0], full[1], self.weight.shape[1 + self.tp_axis], self.tp_axis, init_method,
                    stride=stride, params_dtype=self.weight.dtype, rank=tp_rank, world_size=tp_size,
                    skip_set_tensor_parallel_attributes=True)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Grouped GEMM of expert-sorted ``x`` (``[tokens, in]``) with int32 cumulative ``offsets`` per expert."""
        return grouped_matmul(x, self.weight, offsets)

    def get_extra_state(self) -> None:
        """No extra state; the ``_extra_state`` key exists to match TE's state dict."""
        return None

    def set_extra_state(self, state: Any) -> None:
        """TE's extra state (fp8 metadata) has no meaning here and is ignored."""

    def backward_dw(self) -> None:
        """Weight gradients are computed in the ordinary backward pass; nothing is deferred (the torch backend
        refuses the settings that would defer them, see ``selection.WGRAD_DEFERRAL_SETTINGS``)."""

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> ShardedStateDict:
        """The stacked ``weight`` as one ShardedTensor ``{prefix}weight``, plus TE's per-expert extra-state objects.

        Global tensor: the ``sharded_offsets`` axes, then experts (this rank's start at ``ep_rank * E``), output and
        input features (expert-TP split on the output for column, the input for row). That is the global tensor TE's
        per-expert ``weight{i}`` shards describe under the same key with the expert axis prepended, so checkpoints
        load across backends. The ShardedTensor's data is the parameter itself (under FSDP2 its local shard, every
        data-parallel rank a main replica): megatron-core's optimizers find the model tensor of each parameter by
        identity. Per-expert singleton shards (``singleton_local_shards``, which
        megatron's training checkpoints never request) cannot describe one stacked tensor and are refused.
        """
        if (metadata or {}).get("singleton_local_shards", False):
            raise ValueError("the torch backend's stacked experts cannot be saved as per-expert singleton shards "
                             "(singleton_local_shards=True); megatron's training checkpoints do not use them")
        fsdp2 = fsdp2_mesh(self.weight)
        weight = ShardedTensor.from_rank_offsets(
            f"{prefix}weight",
            self.weight if fsdp2 is None else self.weight._local_tensor,
            *self.weight_rank_offsets(sharded_offsets),
            replica_id=(0, 0, get_pg_rank(self.expt_dp_group) if fsdp2 is None else 0),
            prepend_axis_num=len(sharded_offsets),
        )
        return {f"{prefix}weight": weight, **self._extra_state_objects(prefix, sharded_offsets)}

    def weight_rank_offsets(self, sharded_offsets: tuple) -> list[tuple[int, int, int]]:
        """``(axis, rank offset, fragments)`` of the stacked weight: the given axes, experts over EP (and over the
        data-parallel ranks within, where FSDP2 shards the parameter), features over TP."""
        prepend = len(sharded_offsets)
        expert_rank, expert_fragments = get_pg_rank(self.ep_group), get_pg_size(self.ep_group)
        fsdp2 = fsdp2_mesh(self.weight)
        if fsdp2 is not None:
            dp_rank, dp_size = fsdp2
            if self.weight.shape[0] % dp_size:
                raise ValueError(f"FSDP2 splits {self.weight.shape[0]} local experts unevenly over {dp_size} "
                                 "data-parallel ranks; a checkpoint can only describe equal expert blocks")
            expert_rank, expert_fragments = expert_rank * dp_size + dp_rank, expert_fragments * dp_size
        return [
            *sharded_offsets,
            (prepend, expert_rank, expert_fragments),
            (prepend + 1 + self.tp_axis, get_pg_rank(self.tp_group), get_pg_size(self.tp_group)),
        ]

    def _extra_state_objects(self, prefix: str, sharded_offsets: tuple) -> ShardedStateDict:
        """TE's ``{prefix}_extra_state{i or ''}`` ShardedObjects, one per local expert on the global-expert axis."""
        num_global_experts = get_pg_size(self.ep_group) * self.num_local_experts
        first_global_expert = get_pg_rank(self.ep_group) * self.num_local_experts
        replica_id = (0, get_pg_rank(self.tp_group), get_pg_rank(self.expt_dp_object_group))
        return {
            f"{prefix}_extra_state{'' if i == 0 else i}": make_sharded_object_for_checkpoint(
                self.get_extra_state(), f"{prefix}_extra_state",
                (*sharded_offsets, (len(sharded_offsets), first_global_expert + i, num_global_experts)),
                replica_id=replica_id,
            )
            for i in range(self.num_local_experts)
        }


def fsdp2_mesh(weight: torch.Tensor) -> tuple[int, int] | None:
    """``(rank, ranks)`` of the data-parallel mesh over which torch FSDP2 shards ``weight`` along its first (expert)
    axis, or None for a parameter FSDP2 does not hold. megatron-core marks FSDP2's DTensor parameters
    ``is_torch_fsdp2_param``; its optimizers find a parameter's checkpoint tensor by the identity of its local shard,
    so that shard is what the checkpoint tensor must carry."""
    if not (getattr(weight, "is_torch_fsdp2_param", False) and isinstance(weight, DTensor)):
        return None
    if tuple(weight.placements) != (Shard(0),):
        raise ValueError(f"FSDP2 holds the stacked experts as {tuple(weight.placements)}; their checkpoint describes "
                         "only a one-dimensional mesh sharding the expert axis (Shard(0), FSDP2's default)")
    mesh = weight.device_mesh
    return mesh.get_local_rank(), mesh.size()


def stacked_swiglu_factory(weight: ShardedTensor, rank_offsets: list[tuple[int, int, int]]) -> ShardedTensorFactory:
    """A stacked gated fc1 ``[experts, 2 x ffn, hidden]`` (``rank_offsets`` from ``weight_rank_offsets``: the given
    axes, the expert axis, then the output-feature TP axis) saved as each expert's two halves, each split over expert
    TP.

    The same global layout as megatron-core's SwiGLU factory gives one expert's ``[2 x ffn, hidden]`` weight: all TP
    ranks' first halves, then all second halves, so a checkpoint reshards to another expert-TP size. Each shard is one
    expert's half, a contiguous view of the weight: megatron-core's loader makes a non-contiguous shard contiguous
    (a copy) where the layer axis is prepended (GPTModel's blocks), and a load that writes into the model's tensors
    in place (FSDP2 ``torch_dist`` resumes, which skip ``load_state_dict``) then never reached the weight (the tiny
    Qwen3 card on an H200, session 40). Flattened shards (the distributed optimizer's deprecated
    ``fully_sharded_model_space`` format) are refused rather than written wrongly.
    """
    *given_axes, (expert_axis, expert_rank, expert_fragments), (out_axis, tp_rank, tp_size) = rank_offsets

    def build(key: str, data: torch.Tensor, replica_id: Any, flattened_range: slice | None) -> list[ShardedTensor]:
        if flattened_range is not None:
            raise ValueError("the torch backend's stacked experts do not support flattened optimizer shards "
                             "(fully_sharded_model_space); use dp_reshardable (megatron's default) or "
                             "--dist-ckpt-optim-fully-reshardable")
        num_local_experts = data.shape[0]
        return [
            ShardedTensor.from_rank_offsets(
                key, half, *given_axes,
                (expert_axis, expert_rank * num_local_experts + expert, expert_fragments * num_local_experts),
                (out_axis, tp_rank + part * tp_size, 2 * tp_size),
                replica_id=replica_id, prepend_axis_num=weight.prepend_axis_num)
            for expert in range(num_local_experts)
            for part, half in enumerate(torch.chunk(data[expert:expert + 1], 2, dim=1))
        ]

    def merge(halves: list[torch.Tensor]) -> torch.Tensor:
        experts = [torch.cat(halves[i:i + 2], dim=1) for i in range(0, len(halves), 2)]
        return torch.cat(experts, dim=0)

    return ShardedTensorFactory(weight.key, weight.data, build, merge, weight.replica_id)


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
    """Load pre-hook: stack TE-style ``{prefix}weight{i}`` entries back into the one ``{prefix}weight``, and drop TE's
    per-expert ``_extra_state{i}`` (i >= 1) that a distributed checkpoint carries (extra state is ignored here)."""
    names = [f"{prefix}weight{i}" for i in range(module.num_local_experts)]
    if all(name in state_dict for name in names):
        state_dict[f"{prefix}weight"] = torch.stack([state_dict.pop(name) for name in names])
    for i in range(1, module.num_local_experts):
        state_dict.pop(f"{prefix}_extra_state{i}", None)


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
    offsets are the running sum of ``tokens_per_expert`` computed on the GPU as int32 (:func:`expert_end_offsets`), so
    a step never waits on the host.
    With ``bias_activation_fusion`` a SwiGLU and the probability product run as megatron-core's fused (compiled)
    weighted SwiGLU, which saves only fc1's output and the probabilities for the backward pass (see
    :func:`uses_fused_swiglu`). With selective recompute of ``moe_act`` (``recompute_granularity='selective'``,
    ``'moe_act'`` in ``recompute_modules``) the activation's output is freed once fc2 has used it and recomputed
    in the backward pass, as TEGroupedMLP does. Submodules ``linear_fc1``/``linear_fc2`` and the (sharded) state
    dict match TEGroupedMLP's.
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
        if config.moe_apply_probs_on_input and config.moe_router_topk != 1:
            raise ValueError("moe_apply_probs_on_input only works with moe_router_topk=1")
        self.fused_swiglu = uses_fused_swiglu(config)
        self.activation_recompute = (
            config.recompute_granularity == "selective" and "moe_act" in (config.recompute_modules or ())
        )
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
        offsets = expert_end_offsets(tokens_per_expert, hidden.device)
        probs = permuted_probs.unsqueeze(-1)
        if self.config.moe_apply_probs_on_input:
            hidden = (probs * hidden).to(hidden.dtype)
            probs = None
        fc1_out = self.linear_fc1(hidden, offsets)
        if not self.activation_recompute:
            return self.linear_fc2(self.weighted_activation(fc1_out, probs), offsets), None
        checkpoint = CheckpointWithoutOutput(fp8=self.config.fp8)
        intermediate = checkpoint.checkpoint(self.weighted_activation, fc1_out, probs)
        output = self.linear_fc2(intermediate, offsets)
        checkpoint.discard_output_and_register_recompute(output)
        return output, None

    def weighted_activation(self, fc1_out: torch.Tensor, probs: torch.Tensor | None) -> torch.Tensor:
        """fc2's input: the activation of ``fc1_out`` times the routing probabilities ``probs`` (``[tokens, 1]``;
        None when they were applied on the input), fused where :func:`uses_fused_swiglu` holds, else eager."""
        fp8_store = self.config.activation_func_fp8_input_store
        if self.fused_swiglu and probs is not None:
            return weighted_bias_swiglu_impl(fc1_out, None, probs, fp8_store)
        if self.fused_swiglu:
            return bias_swiglu_impl(fc1_out, None, fp8_store)
        intermediate = self.activation(fc1_out)
        return intermediate if probs is None else (intermediate * probs).to(intermediate.dtype)

    def backward_dw(self) -> None:
        """Weight gradients are not deferred by this module; nothing to do (see
        :meth:`StackedGroupedLinear.backward_dw`)."""

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> ShardedStateDict:
        """TEGroupedMLP's checkpoint layout: tensors under ``{prefix}experts.linear_fc{1,2}.weight`` (one stacked
        tensor per projection, see :meth:`StackedGroupedLinear.sharded_state_dict`), gated fc1 written as each expert's
        two halves (:func:`stacked_swiglu_factory`) for TP resharding and in-place loads."""
        sharded: ShardedStateDict = {}
        for name, module in self._modules.items():
            sub = module.sharded_state_dict(f"{name}.", sharded_offsets, metadata)
            if name == "linear_fc1" and self.config.gated_linear_unit:
                key = f"{name}.weight"
                sub[key] = stacked_swiglu_factory(sub[key], module.weight_rank_offsets(sharded_offsets))
            replace_prefix_for_sharding(sub, f"{name}.", f"{prefix}experts.{name}.")
            sharded.update({f"{prefix}{k}": v for k, v in sub.items()})
        return sharded
