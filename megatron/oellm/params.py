"""Parameter counts of a model card: total, active per token, and per component.

Active parameters are what one token touches: everything except the routed experts, plus ``topk / num_experts``
of them. Counts follow the Hugging Face layout of each family (which is what "35B-A3B" and friends refer to); the
parameter-count test checks them against transformers' own models built on the meta device.
Pure Python: no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.oellm.cards import ModelCard


@dataclass(frozen=True)
class ParameterCounts:
    """Parameter counts of one model."""

    total: int
    """All parameters."""
    active: int
    """Parameters one token uses: non-expert + top-k/E of the routed experts."""
    breakdown: dict[str, int]
    """Component -> parameters summed over the whole model."""
    routed_experts: int
    """Parameters of all routed experts (the part that is only top-k/E active)."""

    @property
    def active_without_input_embedding(self) -> int:
        """:attr:`active` less the input embedding table, of which a token reads one row (a lookup, no matrix
        product): the vocabulary matrix is then counted once, as the output layer. The MN5 report #438 quotes the
        OEL CKDA hybrid's active count this way (its "2.7B active"), while :attr:`active` follows Hugging Face's
        convention (both tables). With tied embeddings the one table is the output layer: nothing is left out."""
        if "output_layer" not in self.breakdown:
            return self.active
        return self.active - self.breakdown["embedding"]


def attention_layer_params(card: ModelCard) -> int:
    """One softmax-attention mixer: q (+ output gate), k, v, o projections and the per-head QK norms."""
    q_width = card.num_attention_heads * card.kv_channels
    kv_width = card.num_query_groups * card.kv_channels
    q_proj = card.hidden_size * q_width * (2 if card.attention_output_gate else 1)
    kv_proj = 2 * card.hidden_size * kv_width
    out_proj = q_width * card.hidden_size
    qk_norm = 2 * card.kv_channels if card.qk_layernorm else 0
    return q_proj + kv_proj + out_proj + qk_norm


def gdn_layer_params(card: ModelCard) -> int:
    """One Gated DeltaNet mixer: fused q/k/v, z (output gate), beta and alpha projections, depthwise conv,
    per-head decay (A_log) and dt bias, gated output norm (per value-head dim) and output projection."""
    key_width, value_width = card.linear_key_width, card.linear_value_width
    conv_channels = 2 * key_width + value_width
    heads = card.linear_num_value_heads
    in_proj = card.hidden_size * (conv_channels + value_width + 2 * heads)
    conv = conv_channels * card.linear_conv_kernel_dim
    return in_proj + conv + 2 * heads + card.linear_value_head_dim + value_width * card.hidden_size


def ckda_layer_params(card: ModelCard) -> int:
    """One CKDA mixer (placeholder shape until the CKDA layer lands): q/k/v projections, depthwise conv on q/k/v,
    per-head beta, low-rank decay gate (one per value head and key channel, as fla's KDA with grouped values) and
    low-rank output gate, A_log/dt bias, output norm and output projection."""
    key_width, value_width = card.linear_key_width, card.linear_value_width
    heads = card.linear_num_value_heads
    rank = card.linear_gate_low_rank_dim
    qkv = card.hidden_size * (2 * key_width + value_width)
    conv = (2 * key_width + value_width) * card.linear_conv_kernel_dim
    beta = card.hidden_size * heads
    decay_gate = card.hidden_size * rank + rank * heads * card.linear_key_head_dim  # per value head, per key channel
    output_gate = card.hidden_size * rank + rank * value_width
    return (qkv + conv + beta + decay_gate + output_gate + 2 * heads + card.linear_value_head_dim
            + value_width * card.hidden_size)


def swiglu_params(hidden: int, intermediate: int) -> int:
    """A bias-free SwiGLU MLP: gate and up (hidden -> intermediate) and down (intermediate -> hidden)."""
    return 3 * hidden * intermediate


MIXER_PARAMS = {"attention": attention_layer_params, "gdn": gdn_layer_params, "ckda": ckda_layer_params}
"""Mixer type (``card.mixer_types``) -> parameters of one such mixer."""


def moe_block_params(card: ModelCard) -> dict[str, int]:
    """Parameters of one decoder layer's MoE block by component: routed experts, router, and where the card has
    them the shared expert and its gate."""
    parts = {"routed_experts": card.num_experts * swiglu_params(card.hidden_size, card.moe_ffn_hidden_size),
             "router": card.num_experts * card.hidden_size}
    if card.moe_shared_expert_intermediate_size:
        parts["shared_expert"] = swiglu_params(card.hidden_size, card.moe_shared_expert_intermediate_size)
    if card.moe_shared_expert_gate:
        parts["shared_expert_gate"] = card.hidden_size
    return parts


def layer_params(card: ModelCard, mixer: str) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters of one decoder layer whose mixer is ``mixer``: the mixer, its two
    norms, the router, the shared expert and its gate; the routed experts."""
    moe = moe_block_params(card)
    routed = moe.pop("routed_experts")
    return MIXER_PARAMS[mixer](card) + 2 * card.hidden_size + sum(moe.values()), routed


def tp_replicated_layer_params(card: ModelCard, mixer: str) -> int:
    """Parameters of one decoder layer that megatron-core keeps whole on every tensor-parallel rank instead of
    splitting: the two layer norms, the router, the shared expert's gate, and the mixer's per-head norms (QK norms of
    attention, the gated output norm of a linear mixer). All are part of :func:`layer_params`'s non-expert count."""
    mixer_norms = {"attention": 2 * card.kv_channels if card.qk_layernorm else 0,
                   "gdn": card.linear_value_head_dim, "ckda": card.linear_value_head_dim}[mixer]
    moe = moe_block_params(card)
    return 2 * card.hidden_size + moe["router"] + moe.get("shared_expert_gate", 0) + mixer_norms


def parameter_counts(card: ModelCard) -> ParameterCounts:
    """Total, active and per-component parameter counts of ``card``."""
    breakdown: dict[str, int] = {}
    for mixer in card.mixer_types:
        breakdown[mixer] = breakdown.get(mixer, 0) + MIXER_PARAMS[mixer](card)
    layers = card.num_layers
    breakdown.update({name: layers * count for name, count in moe_block_params(card).items()})
    routed = breakdown["routed_experts"]
    breakdown["norms"] = (2 * layers + 1) * card.hidden_size
    breakdown["embedding"] = card.vocab_size * card.hidden_size
    if card.untie_embeddings:
        breakdown["output_layer"] = card.vocab_size * card.hidden_size
    total = sum(breakdown.values())
    active = total - routed + routed * card.moe_router_topk // card.num_experts
    return ParameterCounts(total=total, active=active, breakdown=breakdown, routed_experts=routed)


def format_count(n: float) -> str:
    """Human-readable parameter count: 34.66B, 3.10B, 812.3M, 12.4K."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(int(n))
