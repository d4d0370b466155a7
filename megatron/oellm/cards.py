"""Model cards: every hyper-parameter of a model in one frozen dataclass, plus a registry by name.

A card is the single source the spec builders, FLOP accounting, parameter counts, converters and recipes read.
Names are ``<model>`` for the published model and ``<model>-tiny`` / ``<model>-proxy-<N>L`` for its flavours:

* ``tiny``: structurally complete (every layer kind, shared expert, GQA, partial RoPE) but a few MB, for tests;
* ``proxy-<N>L``: full width with ``N`` layers, at most the model's (the mixer pattern kept), for one-GPU runs and
  benchmarks.

Pure Python: importing this module never imports torch or megatron-core.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

LinearMixer = Literal["none", "gdn", "ckda"]
Mixer = Literal["attention", "gdn", "ckda"]

HYBRID_SYMBOLS: dict[str, str] = {"attention": "*", "gdn": "G", "ckda": "K", "moe": "E"}
"""megatron-core hybrid layer-pattern symbols (``megatron.core.models.hybrid``); ``K`` is ours (CKDA)."""


class CardError(ValueError):
    """A model card or card name is invalid; the message names the fix."""


@dataclass(frozen=True)
class ModelCard:
    """All hyper-parameters of one decoder-only MoE language model (text part only, no MTP)."""

    name: str
    """Registry name, e.g. ``qwen3.5-35b-a3b`` or ``qwen3.5-35b-a3b-proxy-4L``."""
    family: Literal["qwen3_5", "qwen3_moe", "ckda_hybrid"]
    """Model family: selects the spec builder and checkpoint converter (``megatron/oellm/models/<family>``)."""
    num_layers: int
    """Decoder layers; each is one token mixer followed by one MoE block."""
    hidden_size: int
    """Residual stream width."""
    vocab_size: int
    """Tokenizer vocabulary. Recipes override it (e.g. the 262,144 padded OEL vocabulary) with ``with_vocab``."""
    num_attention_heads: int
    """Query heads of the softmax-attention layers."""
    num_query_groups: int
    """Key/value heads of the softmax-attention layers (GQA groups)."""
    kv_channels: int
    """Head dimension of the softmax-attention layers."""
    qk_layernorm: bool
    """RMSNorm over each query and key head before RoPE."""
    attention_output_gate: bool
    """Sigmoid output gate on attention (a second query-sized projection, Qwen3-Next / Qwen3.5 style)."""
    rotary_percent: float
    """Fraction of each head's dimensions rotated by RoPE."""
    rotary_base: float
    """RoPE base frequency."""
    num_experts: int
    """Routed experts per MoE block."""
    moe_ffn_hidden_size: int
    """Intermediate width of one routed expert (SwiGLU)."""
    moe_router_topk: int
    """Routed experts chosen per token."""
    moe_aux_loss_coeff: float
    """Load-balancing auxiliary loss coefficient."""
    moe_router_load_balancing_type: Literal["aux_loss", "seq_aux_loss", "global_aux_loss", "none"]
    """Megatron load-balancing loss type."""
    moe_router_pre_softmax: bool = False
    """Megatron's ``moe_router_pre_softmax``: softmax over all experts, then top-k, no renormalisation. False =
    top-k on the logits, then softmax over the chosen k, which equals the Qwen routers' softmax -> top-k ->
    renormalise (``norm_topk_prob``)."""
    moe_shared_expert_intermediate_size: int = 0
    """Intermediate width of the shared expert (SwiGLU); 0 = none."""
    moe_shared_expert_gate: bool = False
    """Sigmoid scalar gate (hidden -> 1) on the shared expert's output."""
    linear_mixer: LinearMixer = "none"
    """Linear-attention mixer of the non-attention layers: ``gdn`` (Gated DeltaNet) or ``ckda``."""
    full_attention_interval: int = 1
    """Every ``full_attention_interval``-th layer (1-based) is softmax attention, the others ``linear_mixer``."""
    linear_num_key_heads: int = 0
    """Linear mixer query/key heads."""
    linear_num_value_heads: int = 0
    """Linear mixer value heads."""
    linear_key_head_dim: int = 0
    """Linear mixer query/key head dimension."""
    linear_value_head_dim: int = 0
    """Linear mixer value head dimension."""
    linear_conv_kernel_dim: int = 0
    """Depthwise causal short-convolution width of the linear mixer."""
    linear_gate_low_rank_dim: int = 0
    """CKDA only: rank of the low-rank decay-gate and output-gate projections."""
    norm_epsilon: float = 1e-6
    """RMSNorm epsilon."""
    zero_centered_norm: bool = False
    """RMSNorm weights stored as ``w - 1`` (zero-centred gamma, Qwen3.5)."""
    untie_embeddings: bool = True
    """Separate input embedding and output projection."""
    max_position_embeddings: int = 32768
    """Longest sequence RoPE is set up for."""
    seq_length: int = 4096
    """Default training sequence length of the recipes."""
    hf_architecture: str = ""
    """Hugging Face ``transformers`` class this card corresponds to (empty: none)."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    """Where each group of values comes from (field name or group -> note)."""

    def __post_init__(self) -> None:
        validate_card(self)

    @property
    def mixer_types(self) -> tuple[Mixer, ...]:
        """Token mixer of each layer, in order."""
        if self.linear_mixer == "none":
            return ("attention",) * self.num_layers
        return tuple(
            "attention" if (i + 1) % self.full_attention_interval == 0 else self.linear_mixer
            for i in range(self.num_layers)
        )

    @property
    def num_attention_layers(self) -> int:
        """Number of softmax-attention layers."""
        return self.mixer_types.count("attention")

    @property
    def num_linear_layers(self) -> int:
        """Number of linear-attention (GDN / CKDA) layers."""
        return self.num_layers - self.num_attention_layers

    @property
    def linear_key_width(self) -> int:
        """Query/key width of a linear-attention mixer: key heads x key head dim."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_width(self) -> int:
        """Value (and output-gate) width of a linear-attention mixer: value heads x value head dim."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def hybrid_layer_pattern(self) -> str:
        """megatron-core hybrid pattern: one mixer symbol then ``E`` (MoE) per decoder layer."""
        return "".join(HYBRID_SYMBOLS[m] + HYBRID_SYMBOLS["moe"] for m in self.mixer_types)

    def with_vocab(self, vocab_size: int) -> ModelCard:
        """The same card with another vocabulary (e.g. the OEL 262,144 padded vocabulary)."""
        return dataclasses.replace(self, vocab_size=vocab_size)

    def with_layers(self, num_layers: int, name: str | None = None) -> ModelCard:
        """The same card with ``num_layers`` layers (mixer pattern kept); used for proxies."""
        return dataclasses.replace(self, num_layers=num_layers, name=name or f"{self.name}-proxy-{num_layers}L")


@functools.cache
def literal_choices() -> dict[str, tuple[str, ...]]:
    """The values each ``Literal``-typed :class:`ModelCard` field may take (field name -> choices): a card built from
    Megatron's flags carries whatever value the flag had, which the type alone does not stop."""
    hints = typing.get_type_hints(ModelCard)
    return {name: typing.get_args(hint) for name, hint in hints.items() if typing.get_origin(hint) is Literal}


def validate_card(card: ModelCard) -> None:
    """All cross-field checks of a card, in one place; raises :class:`CardError` naming the fix."""
    for name, choices in literal_choices().items():
        if getattr(card, name) not in choices:
            raise CardError(f"{card.name}: {name} must be one of {', '.join(choices)} (what this release models and "
                            f"counts), got {getattr(card, name)!r}")
    positive = ["num_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_query_groups",
                "kv_channels", "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "seq_length"]
    for name in positive:
        if getattr(card, name) <= 0:
            raise CardError(f"{card.name}: {name} must be positive, got {getattr(card, name)}")
    if card.max_position_embeddings <= 0:
        raise CardError(f"{card.name}: max_position_embeddings must be positive, got {card.max_position_embeddings}")
    non_negative = ["moe_shared_expert_intermediate_size", "linear_num_key_heads", "linear_num_value_heads",
                    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
                    "linear_gate_low_rank_dim"]
    for name in non_negative:  # 0 = absent; a negative width would enter the parameter and FLOP counts
        if getattr(card, name) < 0:
            raise CardError(f"{card.name}: {name} must be 0 (none) or positive, got {getattr(card, name)}")
    if card.num_attention_heads % card.num_query_groups:
        raise CardError(f"{card.name}: num_attention_heads ({card.num_attention_heads}) must be a multiple of "
                        f"num_query_groups ({card.num_query_groups})")
    if card.moe_router_topk > card.num_experts:
        raise CardError(f"{card.name}: moe_router_topk ({card.moe_router_topk}) exceeds num_experts "
                        f"({card.num_experts})")
    if not 0.0 < card.rotary_percent <= 1.0:
        raise CardError(f"{card.name}: rotary_percent must be in (0, 1], got {card.rotary_percent}")
    if card.moe_shared_expert_gate and card.moe_shared_expert_intermediate_size == 0:
        raise CardError(f"{card.name}: moe_shared_expert_gate needs a shared expert "
                        "(moe_shared_expert_intermediate_size > 0)")
    if card.linear_mixer == "none":
        if card.full_attention_interval != 1:
            raise CardError(f"{card.name}: full_attention_interval must be 1 without a linear mixer")
        return
    linear = ["linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_conv_kernel_dim"]
    for name in linear:
        if getattr(card, name) <= 0:
            raise CardError(f"{card.name}: {name} must be positive for linear_mixer={card.linear_mixer!r}")
    if card.full_attention_interval < 2:
        raise CardError(f"{card.name}: full_attention_interval must be >= 2 with a linear mixer")
    if card.num_layers % card.full_attention_interval:
        raise CardError(f"{card.name}: num_layers ({card.num_layers}) must be a multiple of "
                        f"full_attention_interval ({card.full_attention_interval}) to keep the mixer pattern; "
                        f"use a proxy of {card.full_attention_interval * max(1, card.num_layers // card.full_attention_interval)} layers")
    if card.linear_num_value_heads % card.linear_num_key_heads:
        raise CardError(f"{card.name}: linear_num_value_heads must be a multiple of linear_num_key_heads")
    if card.linear_mixer == "ckda" and card.linear_gate_low_rank_dim <= 0:
        raise CardError(f"{card.name}: ckda needs linear_gate_low_rank_dim > 0")


QWEN3_5_35B_A3B = ModelCard(
    name="qwen3.5-35b-a3b",
    family="qwen3_5",
    num_layers=40,
    hidden_size=2048,
    vocab_size=248320,
    num_attention_heads=16,
    num_query_groups=2,
    kv_channels=256,
    qk_layernorm=True,
    attention_output_gate=True,
    rotary_percent=0.25,
    rotary_base=1e7,
    num_experts=256,
    moe_ffn_hidden_size=512,
    moe_router_topk=8,
    moe_aux_loss_coeff=1e-3,
    moe_router_load_balancing_type="global_aux_loss",
    moe_shared_expert_intermediate_size=512,
    moe_shared_expert_gate=True,
    linear_mixer="gdn",
    full_attention_interval=4,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    norm_epsilon=1e-6,
    zero_centered_norm=True,
    untie_embeddings=True,
    max_position_embeddings=262144,
    seq_length=4096,
    hf_architecture="Qwen3_5MoeForCausalLM",
    sources={
        "shape": "Qwen/Qwen3.5-35B-A3B config.json text_config; transformers' Qwen3_5MoeTextConfig defaults agree "
                 "except rope_theta (default 1e4; the checkpoint's 1e7) and max_position_embeddings (default 32768; the "
                 "checkpoint's 262144)",
        "attention": "16 q / 2 kv x 256, sigmoid output gate, QK RMSNorm, partial_rotary_factor 0.25, rope_theta 1e7",
        "gdn": "linear_num_key_heads 16, linear_num_value_heads 32, head dims 128, conv kernel 4; "
               "full_attention_interval 4",
        "moe": "256 x 512 top-8, softmax router with top-k renormalisation, shared expert 512 with sigmoid gate",
        "aux_loss": "router_aux_loss_coef 1e-3; MN5 report #438 uses the global aux loss",
        "norm": "Qwen3_5MoeRMSNorm: zero-centred (1 + w), eps 1e-6",
        "vocab": "248,320 (HF); the OEL runs use the 262,144 padded OEL vocabulary via with_vocab",
    },
)

QWEN3_30B_A3B = ModelCard(
    name="qwen3-30b-a3b",
    family="qwen3_moe",
    num_layers=48,
    hidden_size=2048,
    vocab_size=151936,
    num_attention_heads=32,
    num_query_groups=4,
    kv_channels=128,
    qk_layernorm=True,
    attention_output_gate=False,
    rotary_percent=1.0,
    rotary_base=1e6,
    num_experts=128,
    moe_ffn_hidden_size=768,
    moe_router_topk=8,
    moe_aux_loss_coeff=1e-3,
    moe_router_load_balancing_type="global_aux_loss",
    norm_epsilon=1e-6,
    untie_embeddings=True,
    max_position_embeddings=40960,
    seq_length=4096,
    hf_architecture="Qwen3MoeForCausalLM",
    sources={
        "shape": "Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 q / 4 kv x 128, QK-norm, rope_theta 1e6",
        "moe": "128 x 768 top-8, norm_topk_prob true, no shared expert, router_aux_loss_coef 1e-3",
        "vocab": "151,936 (HF); MN5 runs use the 262,144 padded OEL vocabulary via with_vocab",
    },
)

QWEN3_235B_A22B = ModelCard(
    name="qwen3-235b-a22b",
    family="qwen3_moe",
    num_layers=94,
    hidden_size=4096,
    vocab_size=151936,
    num_attention_heads=64,
    num_query_groups=4,
    kv_channels=128,
    qk_layernorm=True,
    attention_output_gate=False,
    rotary_percent=1.0,
    rotary_base=1e6,
    num_experts=128,
    moe_ffn_hidden_size=1536,
    moe_router_topk=8,
    moe_aux_loss_coeff=1e-3,
    moe_router_load_balancing_type="global_aux_loss",
    norm_epsilon=1e-6,
    untie_embeddings=True,
    max_position_embeddings=40960,
    seq_length=4096,
    hf_architecture="Qwen3MoeForCausalLM",
    sources={
        "shape": "Qwen/Qwen3-235B-A22B config.json: 94 layers, hidden 4096, 64 q / 4 kv x 128, QK-norm, rope 1e6",
        "moe": "128 x 1536 top-8, norm_topk_prob true, no shared expert",
        "vocab": "151,936 (the Jupiter runs keep the Qwen vocabulary)",
    },
)

OELLM_CKDA_HYBRID = ModelCard(
    name="oellm-ckda-hybrid",
    family="ckda_hybrid",
    num_layers=48,
    hidden_size=2048,
    vocab_size=262144,
    num_attention_heads=16,
    num_query_groups=4,
    kv_channels=128,
    qk_layernorm=True,
    attention_output_gate=True,
    rotary_percent=1.0,
    rotary_base=1e6,
    num_experts=160,
    moe_ffn_hidden_size=768,
    moe_router_topk=5,
    moe_aux_loss_coeff=1e-3,
    moe_router_load_balancing_type="global_aux_loss",
    moe_shared_expert_intermediate_size=768,
    moe_shared_expert_gate=True,
    linear_mixer="ckda",
    full_attention_interval=6,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    linear_gate_low_rank_dim=128,
    norm_epsilon=1e-6,
    untie_embeddings=True,
    max_position_embeddings=8192,
    seq_length=8192,
    sources={
        "shape": "MN5 report #438 (kpoeppel): ~39B total / 2.7B active, CKDA 5:1, 160 x 768 top-5 + 1 shared, "
                 "262k vocab, 8k document-masked, plain residual",
        "inferred": "not in the report: 48 layers, hidden 2,048, the shared expert's width 768 with its gate and the "
                    "attention's output gate (Qwen3.5's), chosen so that the counts meet the report's ~39B / 2.7B",
        "placeholder": "attention and CKDA head shapes are placeholders until the CKDA issue completes this card",
        "params": "38.39B total / 3.28B active counted as the Qwen cards (Hugging Face: input embedding and output "
                  "layer, 262,144 x 2,048 = 0.54B each); the report's 2.7B active is 2.74B, the same count less the "
                  "input embedding (ParameterCounts.active_without_input_embedding)",
    },
)
"""The OEL CKDA hybrid. Its parameter counts (:mod:`megatron.oellm.params`) differ from the MN5 report's "2.7B active"
by one vocabulary table: 38,387,820,800 total and 3,281,496,320 active here (``oellm models``: 38.39B / 3.28B), with
the untied input embedding and output layer (536,870,912 each) both counted, as Hugging Face and the Qwen cards do.
Leaving the input embedding out of the active count (a token reads one row of it) gives 2,744,625,408, the report's
2.7B: the routed experts' 5/160 (1,132,462,080), the shared experts, routers, mixers and norms (1,075,292,416) and
the output layer. The total counts both tables (one table less would be 37.85B, further from the report's ~39B)."""

PUBLISHED_CARDS: dict[str, ModelCard] = {
    c.name: c for c in (QWEN3_5_35B_A3B, QWEN3_30B_A3B, QWEN3_235B_A22B, OELLM_CKDA_HYBRID)
}
"""The published models, by registry name."""


def tiny(card: ModelCard) -> ModelCard:
    """A structurally complete miniature of ``card`` for tests: every layer kind, GQA, shared expert if any."""
    interval = card.full_attention_interval
    linear = card.linear_mixer != "none"
    return dataclasses.replace(
        card,
        name=f"{card.name}-tiny",
        num_layers=interval if linear else 2,
        hidden_size=64,
        vocab_size=512,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=32,
        num_experts=8,
        moe_ffn_hidden_size=32,
        moe_router_topk=2,
        moe_shared_expert_intermediate_size=48 if card.moe_shared_expert_intermediate_size else 0,
        linear_num_key_heads=2 if linear else 0,
        linear_num_value_heads=4 if linear else 0,
        linear_key_head_dim=16 if linear else 0,
        linear_value_head_dim=16 if linear else 0,
        linear_gate_low_rank_dim=8 if card.linear_mixer == "ckda" else 0,
        max_position_embeddings=1024,
        seq_length=128,
    )


_FLAVOUR = re.compile(r"^(?P<base>.+?)(?:-(?P<flavour>tiny|proxy-(?P<layers>\d+)L))?$", re.IGNORECASE)


def get_card(name: str) -> ModelCard:
    """The card registered as ``name``: a published model or ``<model>-tiny`` / ``<model>-proxy-<N>L``.

    Names match whatever their case (``QWEN3-30B-A3B`` is ``qwen3-30b-a3b``, as people type them off the model pages);
    the card returned carries the canonical name, so every output and checkpoint says it one way.
    """
    match = _FLAVOUR.match(name)
    by_lower = {known.lower(): card for known, card in PUBLISHED_CARDS.items()}
    base = by_lower.get(match["base"].lower()) if match else None
    if base is None:
        known = list_card_names()
        close = difflib.get_close_matches(name.lower(), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CardError(f"unknown model {name!r}{hint}; known: {', '.join(known)} "
                        "(flavours: <model>-tiny, <model>-proxy-<N>L)")
    if match["flavour"] is None:
        return base
    if match["flavour"].lower() == "tiny":
        return tiny(base)
    return base.with_layers(proxy_layers(base, match["layers"]), name=f"{base.name}-proxy-{match['layers']}L")


def proxy_layers(base: ModelCard, digits: str) -> int:
    """The layer count ``digits`` of a ``<model>-proxy-<N>L`` name of ``base``; raise :class:`CardError` above
    ``base``'s own depth: a proxy is the model cut short, and a count such as 99999999999996 ended in a MemoryError or
    a hang where the layers are listed (``oellm flops``, ``oellm plan``). Compared as digits first, so a count too long
    for ``int()`` is refused the same way."""
    significant = digits.lstrip("0") or "0"
    if len(significant) <= len(str(base.num_layers)) and int(significant) <= base.num_layers:
        return int(significant)
    shown = significant if len(significant) <= 20 else f"{significant[:8]}... ({len(significant)} digits)"
    raise CardError(f"{base.name}-proxy-{shown}L: a proxy has at most the {base.num_layers} layers of {base.name}; "
                    f"use {base.name} itself or a proxy of fewer layers")


def placeholder_notes(cards: Iterable[ModelCard]) -> list[str]:
    """One ``note:`` line per placeholder (``sources["placeholder"]``) among ``cards``, naming the cards it concerns:
    the parameter counts, FLOPs and memory printed for them rest on values a later issue will replace, which a
    reader comparing them with a report must know."""
    concerned: dict[str, list[str]] = {}
    for card in cards:
        if "placeholder" in card.sources:
            concerned.setdefault(card.sources["placeholder"], []).append(card.name)
    return [f"note: {', '.join(names)}: the numbers rest on placeholder shapes ({text})"
            for text, names in concerned.items()]


def list_card_names() -> list[str]:
    """Published model names plus their listed flavours (tiny and the default one-GPU proxy)."""
    names = []
    for card in PUBLISHED_CARDS.values():
        names += [card.name, f"{card.name}-tiny", f"{card.name}-proxy-{default_proxy_layers(card)}L"]
    return names


def default_proxy_layers(card: ModelCard) -> int:
    """Layers of the listed one-GPU proxy: one full mixer period (at least 2 layers), full width."""
    return max(2, card.full_attention_interval)
