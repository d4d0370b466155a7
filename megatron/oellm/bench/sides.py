"""The sides of ``oellm bench`` on one GPU: transformers' ``Qwen3_5MoeForCausalLM`` and our megatron-core model, on
the torch-native backend (``ours``) and on Transformer Engine's modules (``te``).

All hold the same weights: the transformers model is built from :func:`hf_config_from_card` with its own random
init (bf16, on the GPU), and each of ours is built by the family spec builder on its backend
(:data:`megatron.oellm.bench.BACKEND_OF_SIDE`) and loaded with the family converter's ``hf_to_mcore`` of that
model's state dict. One training step on either side is forward +
language-model loss (+ the MoE load-balancing loss each side's config asks for) + backward, with gradients dropped
at the start of the step; there is no optimizer step on either side (it is the same element-wise update whichever
model produced the gradients, and its fp32 state would halve the memory left for activations).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from megatron.oellm.bench import BACKEND_OF_SIDE
from megatron.oellm.cards import ModelCard
from megatron.oellm.runtime import init_single_gpu_runtime

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig

BEST_OURS_SETTINGS: dict[str, Any] = {
    "cross_entropy_loss_fusion": True,
    "cross_entropy_fusion_impl": "native",
    "bias_activation_fusion": True,
}
"""TransformerConfig fields our sides (``ours`` and ``te``, the same config) run with by default (on top of the spec
builder's): the fused native cross
entropy (our models run :mod:`megatron.oellm.layers.cross_entropy` there, no fp32 copy of the logits) and the fused
SwiGLU of the shared expert and of the routed experts. The MoE
dispatcher stays the spec builder's ``alltoall`` (with EP=1 it only permutes) and activation recompute stays off."""

HF_SETTINGS: dict[str, Any] = {
    "attn_implementation": "sdpa",
    "experts_implementation": "grouped_mm",
    "use_cache": False,
    "output_router_logits": True,
}
"""How the transformers side is built and called: its fastest kernels available without hub downloads (SDPA,
``torch._grouped_mm`` experts; fla's chunked gated delta rule is picked up by transformers when ``fla`` imports),
no KV/state cache in training, and the router load-balancing loss on (as ours has it)."""


def kernel_availability() -> dict[str, bool]:
    """Which optional kernel packages the GDN layers pick up: ``fla`` (chunked gated delta rule, both sides),
    ``causal_conv1d`` (transformers' short convolution; without it transformers runs ``F.conv1d``, ours always
    uses fla's) and whether fla dispatches to its TileLang kernels (``fla_tilelang``) rather than Triton."""
    found = {name: importlib.util.find_spec(name) is not None for name in ("fla", "causal_conv1d")}
    try:
        from fla.backends import TileLangBackend
    except ImportError:
        found["fla_tilelang"] = False
    else:
        found["fla_tilelang"] = TileLangBackend.can_use()
    return found


@dataclass(frozen=True)
class Batch:
    """One micro-batch of random tokens in the forms both sides take."""

    tokens: torch.Tensor
    """``[mbs, seq]`` int64 input ids; transformers shifts them itself to make its labels."""
    next_tokens: torch.Tensor
    """``[mbs, seq]`` the token after each position (last column: a dummy, masked out)."""
    loss_mask: torch.Tensor
    """``[mbs, seq]`` float, 0 on the last position, so both sides average the same ``mbs * (seq - 1)`` terms."""
    position_ids: torch.Tensor
    """``[mbs, seq]`` positions 0 .. seq-1."""
    loss_tokens: torch.Tensor
    """``loss_mask.sum()``, computed once here rather than in every timed step."""


def make_batch(vocab_size: int, mbs: int, seq_length: int, seed: int = 0, device: str = "cuda") -> Batch:
    """A reproducible random batch on ``device`` (the current GPU by default; uniform token ids, so the router sees
    varied inputs)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (mbs, seq_length), device=device, generator=generator)
    next_tokens = torch.roll(tokens, shifts=-1, dims=1)
    loss_mask = torch.ones(mbs, seq_length, device=device)
    loss_mask[:, -1] = 0.0
    positions = torch.arange(seq_length, device=device).unsqueeze(0).expand(mbs, -1)
    return Batch(tokens, next_tokens, loss_mask, positions, loss_mask.sum())


class Side(ABC):
    """A model plus its training step; :meth:`park` / :meth:`activate` move it off / onto the GPU so that each
    side's sweep has the GPU to itself (peak memory and OOM limits are that side's alone)."""

    name: str
    model: torch.nn.Module
    settings: dict[str, Any]

    @abstractmethod
    def step(self, batch: Batch) -> torch.Tensor:
        """Forward, loss and backward on ``batch``; returns the detached language-model loss."""

    def free(self) -> None:
        """Drop the gradients (after a step or an OOM)."""
        self.model.zero_grad(set_to_none=True)

    def park(self) -> None:
        """Move the weights to host memory."""
        self.free()
        self.model.to("cpu")
        torch.cuda.empty_cache()

    def activate(self) -> None:
        """Move the weights back to the GPU."""
        self.model.to("cuda")


class HFSide(Side):
    """transformers' ``Qwen3_5MoeForCausalLM`` with :data:`HF_SETTINGS`."""

    name = "hf"

    def __init__(self, card: ModelCard):
        from transformers import Qwen3_5MoeForCausalLM

        from megatron.oellm.models.qwen3_5.convert import hf_config_from_card

        config = hf_config_from_card(card)
        config.output_router_logits = HF_SETTINGS["output_router_logits"]
        config.use_cache = HF_SETTINGS["use_cache"]
        with torch.device("cuda"):
            self.model = Qwen3_5MoeForCausalLM._from_config(
                config, dtype=torch.bfloat16, attn_implementation=HF_SETTINGS["attn_implementation"],
                experts_implementation=HF_SETTINGS["experts_implementation"])
        self.model.train()
        self.aux_loss_coeff = config.router_aux_loss_coef
        import transformers

        self.settings = {**HF_SETTINGS, "transformers": transformers.__version__,
                         "attn_implementation_used": self.model.config._attn_implementation,
                         "experts_implementation_used": self.model.config._experts_implementation,
                         "kernel_packages": kernel_availability()}

    def step(self, batch: Batch) -> torch.Tensor:
        """transformers' own loss path (bf16 logits upcast, shifted labels) plus its router aux loss.

        The model output is dropped before the backward, as a training loop (transformers' ``Trainer``, ours) drops
        it: it holds the ``[mbs, seq, vocab]`` bf16 logits (and the router logits), which the backward does not need
        and which would otherwise stay allocated through it and count in this side's peak memory.
        """
        self.model.zero_grad(set_to_none=True)
        out = self.model(input_ids=batch.tokens, labels=batch.tokens, use_cache=False)
        loss, aux_loss = out.loss, out.aux_loss
        del out
        loss.backward()
        return loss.detach() - self.aux_loss_coeff * aux_loss.detach()


def ours_transformer_config(card: ModelCard, overrides: dict[str, Any]) -> TransformerConfig:
    """Our sides' megatron-core ``TransformerConfig``: the family spec builder's for ``card`` with ``overrides`` on
    top and megatron's own weight initialisation skipped (the converted transformers weights overwrite it).

    Built on the CPU, it is also how :class:`megatron.oellm.bench.harness.BenchConfig` checks the overrides before
    any GPU work: an unknown field or a combination megatron-core refuses raises here."""
    from megatron.oellm.models import spec_builder

    return spec_builder(card.family).transformer_config(
        card, **{"perform_initialization": False, **typed_overrides(overrides)})


CARD_FIELD_OF_OVERRIDE: dict[str, str] = {
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_query_groups",
    "kv_channels": "kv_channels",
    "qk_layernorm": "qk_layernorm",
    "attention_output_gate": "attention_output_gate",
    "num_moe_experts": "num_experts",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_router_topk": "moe_router_topk",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate": "moe_shared_expert_gate",
    "linear_num_key_heads": "linear_num_key_heads",
    "linear_num_value_heads": "linear_num_value_heads",
    "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim",
    "linear_conv_kernel_dim": "linear_conv_kernel_dim",
}
"""TransformerConfig fields our sides take from the model card, with the card field each comes from: an override
of one is checked by the card's own validation (:func:`megatron.oellm.cards.validate_card`)."""

WEIGHT_SHAPE_OVERRIDES = frozenset(CARD_FIELD_OF_OVERRIDE) - {"moe_router_topk"} | {"num_layers"}
"""TransformerConfig fields that set the shape or number of our sides' weights."""


def check_card_overrides(card: ModelCard, overrides: dict[str, Any]) -> None:
    """Raise ValueError, on the CPU, when ``overrides`` give a field our sides take from ``card`` a value the card's
    validation refuses (not positive, heads not a multiple of the query groups, top-k above the experts, ...) or
    another weight shape than the card's: our sides load the weights of transformers' model of ``card``, so a model
    of another shape cannot take them, and it would otherwise fail only once transformers' model is on the GPU."""
    from megatron.oellm.cards import CardError
    from megatron.oellm.models import spec_builder

    typed = typed_overrides(overrides)
    on_card = {name: value for name, value in typed.items() if name in CARD_FIELD_OF_OVERRIDE}
    given = " ".join(f"{name}={value!r}" for name, value in on_card.items())
    try:
        dataclasses.replace(card, **{CARD_FIELD_OF_OVERRIDE[name]: value for name, value in on_card.items()})
    except CardError as error:
        raise ValueError(f"--ours-config {given}: {error}") from error
    except TypeError as error:  # e.g. a word where a number belongs
        raise ValueError(f"--ours-config {given}: not a value these fields take ({error})") from error
    base = spec_builder(card.family).transformer_config(card, perform_initialization=False)
    for name in sorted(WEIGHT_SHAPE_OVERRIDES & typed.keys()):
        if typed[name] != getattr(base, name):
            raise ValueError(f"--ours-config {name}={overrides[name]!r}: our sides load the weights of transformers' "
                             f"model of {card.name}, whose {name} is {getattr(base, name)!r}, and a model of another "
                             "shape cannot take them; benchmark a --model of that shape instead")


BOOL_FIELD_TYPES = (bool, bool | None)
"""Annotations of the TransformerConfig fields that hold a bool (``distribute_saved_activations`` and
``moe_router_padding_for_fp8`` are ``Optional[bool]``, tested for truth all the same)."""


def typed_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with a name given for an enum-valued TransformerConfig field turned into that enum member
    (``attention_backend=flash`` -> ``AttnBackend.flash``), and ``true`` / ``false`` (any case) given for a bool field
    turned into that bool, as Megatron's argument parser does: megatron-core compares enum fields with the members and
    tests bool fields for truth, so a plain string would match no member, and the string ``"false"`` would turn the
    setting on, without a word. An unknown name or another string for a bool field raises ValueError. An
    ``Optional[bool]`` field is a bool field (:data:`BOOL_FIELD_TYPES`)."""
    from megatron.core.transformer import TransformerConfig

    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    converted = dict(overrides)
    for name, value in overrides.items():
        if not isinstance(value, str) or name not in fields:
            continue
        enum_type = type(fields[name].default)
        if issubclass(enum_type, enum.Enum):
            if value not in enum_type.__members__:
                raise ValueError(f"{name}={value!r}: choose one of {', '.join(enum_type.__members__)}")
            converted[name] = enum_type[value]
        elif fields[name].type in BOOL_FIELD_TYPES:
            if value.lower() not in ("true", "false"):
                raise ValueError(f"{name}={value!r}: {name} is a bool, give True or False")
            converted[name] = value.lower() == "true"
    return converted


class OursSide(Side):
    """Our ``HybridModel`` on one backend (the side's name: ``ours`` torch-native, ``te`` Transformer Engine), loaded
    with the converted transformers weights."""

    def __init__(self, name: str, card: ModelCard, mcore_state: dict[str, torch.Tensor], overrides: dict[str, Any]):
        """``mcore_state``: the transformers model's weights converted to megatron names (shared by our sides; the
        load copies them into the model)."""
        from megatron.oellm.models import spec_builder
        from megatron.oellm.patches import moe_permutation

        self.name = name
        backend = BACKEND_OF_SIDE[name]
        config = ours_transformer_config(card, overrides)
        self.model = spec_builder(card.family).build_model(card, backend=backend, config=config)
        self.model.train()
        load_converted(self.model, mcore_state)
        self.settings = {"backend": backend, "config_overrides": dict(overrides),
                         "moe_token_dispatcher_type": config.moe_token_dispatcher_type,
                         "recompute_granularity": config.recompute_granularity,
                         "moe_permutation": moe_permutation.describe(config.num_moe_experts, config.moe_permute_fusion,
                                                                     config.moe_token_dispatcher_type,
                                                                     config.moe_flex_dispatcher_backend),
                         **backend_settings(backend, config)}

    def step(self, batch: Batch) -> torch.Tensor:
        """megatron-core's per-token loss averaged over the same positions transformers averages over; the MoE
        aux loss enters the backward through megatron's ``MoEAuxLossAutoScaler``."""
        self.model.zero_grad(set_to_none=True)
        per_token = self.model(batch.tokens, batch.position_ids, None, labels=batch.next_tokens)
        loss = (per_token.float() * batch.loss_mask).sum() / batch.loss_tokens
        loss.backward()
        return loss.detach()


def backend_settings(backend: str, config: TransformerConfig) -> dict[str, Any]:
    """What a report needs to know of one backend's kernels: for ``torch`` the RMSNorm path and how the router
    computes its GEMMs; for ``te`` Transformer Engine's version and the attention backend megatron-core asks it for
    (TE then picks among the flash, fused and unfused kernels it finds)."""
    if backend == "te":
        import transformer_engine

        return {"transformer_engine": transformer_engine.__version__,
                "attention_backend": config.attention_backend.name}
    from megatron.oellm.backends.torch_native.router import router_gemm_path
    from megatron.oellm.layers.rms_norm import cuda_path

    return {"rms_norm": cuda_path(), "router_gemms": router_gemm_path(config.moe_router_dtype, config.params_dtype)}


def load_converted(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """``load_state_dict`` of a converter state dict, requiring every model tensor but ``_extra_state`` to be set."""
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"converted weights do not fit the model: missing {missing[:8]}, "
                           f"unexpected {result.unexpected_keys[:8]}")


def build_sides(card: ModelCard, names: list[str], ours_overrides: dict[str, Any]) -> dict[str, Side]:
    """The requested sides with shared weights, all parked on the host; ours (``ours``, ``te``) are always converted
    from a transformers model (built even when only they are benchmarked)."""
    from megatron.oellm.models.qwen3_5.convert import hf_to_mcore

    init_single_gpu_runtime()
    hf = HFSide(card)
    sides: dict[str, Side] = {}
    ours = [name for name in BACKEND_OF_SIDE if name in names]
    if ours:
        with torch.no_grad():
            mcore_state = hf_to_mcore(card, dict(hf.model.state_dict()))  # once, whatever the number of our sides
            for name in ours:
                sides[name] = OursSide(name, card, mcore_state, ours_overrides)
                sides[name].park()
        del mcore_state
    if "hf" in names:
        sides["hf"] = hf
    hf.park()
    return {name: sides[name] for name in names}
