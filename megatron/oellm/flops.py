"""Training FLOPs per token of a model card: the one source of every TFLOP/s and MFU megatron-oellm prints.

Conventions of the corrected count (:func:`training_flops_per_token`):

* matrix work only: 2 FLOPs per multiply-add; element-wise work (norms, RoPE, softmax, activations, gating
  multiplies, the recurrent decay) is not counted. Training = 3 x forward (forward, data grad, weight grad);
  activation recomputation is not counted (model FLOPs, not hardware FLOPs).
* softmax attention: projections with the real number of KV heads, plus the output-gate projection; the core
  (``QK^T`` and ``PV``) counted over the causal pairs a causal kernel computes: ``L_d * (L_d + 1) / 2`` per
  document of length ``L_d``, so packed documents cost the sum over documents, not ``seq_length^2``.
* GDN and CKDA at their recurrent cost: projections, depthwise short convolution, and per value head and token
  the three state products of the delta rule (``S^T k``, the rank-1 update ``k (beta (v - S^T k))^T``, ``S^T q``),
  each ``d_k * d_v`` multiply-adds.
* MoE: router, top-k routed SwiGLU experts, shared SwiGLU expert and its scalar gate, listed separately.
* logits over the padded vocabulary; the embedding lookup costs nothing.

:func:`megatron_flops_per_token` instead calls megatron-core 0.19.2's own
``megatron.training.training.num_floating_point_operations`` on the argument namespace Megatron's own parser builds
from the card's flags, so our logs can be compared one-to-one with runs of upstream Megatron. Importing this
module never imports torch or megatron; megatron is imported only inside :func:`megatron_flops_per_token`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from megatron.oellm.cards import ModelCard
from megatron.oellm.megatron_args import FlagValue, flags_to_argv, model_flags, parse_megatron_argv

FLOPS_PER_MULTIPLY_ADD = 2
"""A multiply-add is two floating-point operations."""
TRAINING_PASSES = 3
"""Forward, backward data gradient, backward weight gradient: each does the forward's matrix work once."""
MEGATRON_VOCAB_DIVISOR = 128
"""Megatron's default ``--make-vocab-size-divisible-by`` (with tensor parallelism 1)."""
CORRECTED_MODE = "corrected"
"""The name of our count of the matrix work (:func:`training_flops_per_token`, docs/flops.md) beside Megatron's own
(``oellm flops --megatron-compatible``): ``oellm flops``' and ``oellm plan``'s ``mode``."""
SWIGLU_MATRICES = 3
"""A SwiGLU MLP has three ``hidden x ffn`` matrices (gate, up, down)."""

DocumentLengths = Sequence[int] | Mapping[int, int]
"""Documents packed into one sequence: a list of lengths, or a histogram ``{length: count}``."""


class FlopError(ValueError):
    """FLOP accounting cannot be done as asked; the message names the fix."""


@dataclass(frozen=True)
class FlopCount:
    """Training FLOPs per token, by component (forward + backward, recomputation not counted)."""

    breakdown: dict[str, float]
    """Component name -> training FLOPs per token; components absent from the model are left out."""

    @property
    def total(self) -> float:
        """Training FLOPs per token, all components."""
        return sum(self.breakdown.values())

    @property
    def gflops_per_token(self) -> float:
        """Training GFLOP per token."""
        return self.total / 1e9

    def gflops_breakdown(self) -> dict[str, float]:
        """Component -> training GFLOP per token."""
        return {name: value / 1e9 for name, value in self.breakdown.items()}


def pad_vocab(vocab_size: int, divisor: int = MEGATRON_VOCAB_DIVISOR) -> int:
    """``vocab_size`` rounded up to a multiple of ``divisor``, as Megatron pads the output layer."""
    return -(-vocab_size // divisor) * divisor


def megatron_padded_vocab(vocab_size: int, tp: int = 1, divisor: int | None = None) -> int:
    """The embedding's rows as Megatron builds them: ``vocab_size`` padded to ``--make-vocab-size-divisible-by``
    (``divisor``; Megatron's default :data:`MEGATRON_VOCAB_DIVISOR` when unset) x tensor-parallel size ``tp``."""
    return pad_vocab(vocab_size, (divisor or MEGATRON_VOCAB_DIVISOR) * tp)


def document_lengths_list(seq_length: int, document_lengths: DocumentLengths | None = None) -> list[int]:
    """The documents of one packed sequence as a list of lengths; ``None`` = one document of ``seq_length``.

    A histogram ``{length: count}`` is expanded. The lengths must be positive and add up to ``seq_length``
    (padding tokens are not modelled: count a padded tail as its own document if it is attended to).
    """
    if document_lengths is None:
        lengths = [seq_length]
    elif isinstance(document_lengths, Mapping):
        lengths = [length for length, count in sorted(document_lengths.items()) for _ in range(count)]
    else:
        lengths = list(document_lengths)
    if any(length <= 0 for length in lengths):
        raise FlopError(f"document lengths must be positive, got {lengths}")
    if sum(lengths) != seq_length:
        raise FlopError(f"document lengths add up to {sum(lengths)}, not seq_length {seq_length}: "
                        "give every document of one packed sequence")
    return lengths


def causal_pairs_per_token(seq_length: int, document_lengths: DocumentLengths | None = None) -> float:
    """Query-key pairs a causal kernel computes, per token: ``sum_d L_d (L_d + 1) / 2 / seq_length``."""
    lengths = document_lengths_list(seq_length, document_lengths)
    return sum(length * (length + 1) // 2 for length in lengths) / seq_length


def forward_flops_per_token(card: ModelCard, seq_length: int, padded_vocab: int | None = None,
                            document_lengths: DocumentLengths | None = None) -> dict[str, float]:
    """Forward FLOPs per token by component (see the module docstring for what is counted).

    ``padded_vocab`` defaults to the card's vocabulary padded to a multiple of 128 (Megatron's default).
    """
    if seq_length <= 0:
        raise FlopError(f"seq_length must be positive, got {seq_length}")
    if padded_vocab is not None and padded_vocab <= 0:
        raise FlopError(f"padded_vocab must be positive, got {padded_vocab} (or leave it out for the card's)")
    macs: dict[str, float] = {}
    macs.update(_attention_macs(card, causal_pairs_per_token(seq_length, document_lengths)))
    if card.linear_mixer == "gdn":
        macs.update(_gdn_macs(card))
    elif card.linear_mixer == "ckda":
        macs.update(_ckda_macs(card))
    macs.update(_moe_macs(card))
    macs["logits"] = card.hidden_size * (padded_vocab or pad_vocab(card.vocab_size))
    return {name: FLOPS_PER_MULTIPLY_ADD * value for name, value in macs.items() if value}


def training_flops_per_token(card: ModelCard, seq_length: int, padded_vocab: int | None = None,
                             document_lengths: DocumentLengths | None = None) -> FlopCount:
    """Corrected training FLOPs per token of ``card`` (3 x :func:`forward_flops_per_token`)."""
    forward = forward_flops_per_token(card, seq_length, padded_vocab, document_lengths)
    return FlopCount({name: TRAINING_PASSES * value for name, value in forward.items()})


def _attention_macs(card: ModelCard, causal_pairs: float) -> dict[str, float]:
    """Multiply-adds per token of all softmax-attention layers."""
    layers = card.num_attention_layers
    q_width = card.num_attention_heads * card.kv_channels
    kv_width = card.num_query_groups * card.kv_channels
    h = card.hidden_size
    return {
        "attention_qkv": layers * h * (q_width + 2 * kv_width),
        "attention_gate": layers * h * q_width if card.attention_output_gate else 0,
        "attention_core": layers * causal_pairs * 2 * q_width,  # QK^T and PV, every query head
        "attention_out": layers * q_width * h,
    }


def _linear_mixer_dims(card: ModelCard) -> tuple[int, int, int]:
    """(layers, key width ``heads_k * d_k``, value width ``heads_v * d_v``) of the linear mixer."""
    return (card.num_linear_layers, card.linear_key_width, card.linear_value_width)


def _delta_rule_macs(card: ModelCard) -> int:
    """Multiply-adds per token of one layer's delta-rule recurrence: three state products per value head."""
    return 3 * card.linear_num_value_heads * card.linear_key_head_dim * card.linear_value_head_dim


def _gdn_macs(card: ModelCard) -> dict[str, float]:
    """Multiply-adds per token of all Gated DeltaNet layers (Qwen3-Next / Qwen3.5 layout)."""
    layers, key_width, value_width = _linear_mixer_dims(card)
    h = card.hidden_size
    return {
        # q, k, v, output gate z, then beta and the decay input a (one scalar per value head each)
        "gdn_in_proj": layers * h * (2 * key_width + 2 * value_width + 2 * card.linear_num_value_heads),
        "gdn_conv": layers * card.linear_conv_kernel_dim * (2 * key_width + value_width),
        "gdn_delta_rule": layers * _delta_rule_macs(card),
        "gdn_out_proj": layers * value_width * h,
    }


def _ckda_macs(card: ModelCard) -> dict[str, float]:
    """Multiply-adds per token of all CKDA layers (Kimi-Delta-Attention layout: low-rank decay and output gates)."""
    layers, key_width, value_width = _linear_mixer_dims(card)
    h, rank = card.hidden_size, card.linear_gate_low_rank_dim
    decay_width = card.linear_num_value_heads * card.linear_key_head_dim  # one decay per key channel and head
    return {
        "ckda_in_proj": layers * h * (2 * key_width + value_width + card.linear_num_value_heads),  # q, k, v, beta
        "ckda_decay_gate": layers * rank * (h + decay_width),
        "ckda_output_gate": layers * rank * (h + value_width),
        "ckda_conv": layers * card.linear_conv_kernel_dim * (2 * key_width + value_width),
        "ckda_delta_rule": layers * _delta_rule_macs(card),
        "ckda_out_proj": layers * value_width * h,
    }


def _moe_macs(card: ModelCard) -> dict[str, float]:
    """Multiply-adds per token of all MoE blocks (every layer has one)."""
    layers, h = card.num_layers, card.hidden_size
    return {
        "moe_router": layers * h * card.num_experts,
        "moe_routed_experts": layers * card.moe_router_topk * SWIGLU_MATRICES * h * card.moe_ffn_hidden_size,
        "moe_shared_expert": layers * SWIGLU_MATRICES * h * card.moe_shared_expert_intermediate_size,
        "moe_shared_expert_gate": layers * h if card.moe_shared_expert_gate else 0,
    }


_LAYER = "a model needs at least one decoder layer"
_WIDTH = "a width needs at least one channel"
_HEADS = "a layer needs at least one head"
SIZE_FLAGS: dict[str, tuple[int, str]] = {
    "num-layers": (1, _LAYER),
    "hidden-size": (1, _WIDTH),
    "ffn-hidden-size": (1, _WIDTH),
    "kv-channels": (1, _WIDTH),
    "num-attention-heads": (1, _HEADS),
    "num-query-groups": (1, "attention needs at least one key/value head"),
    "num-experts": (0, "an expert count is 0 or more (0 or none: no experts, every MLP dense, as megatron-core reads 0)"),
    "moe-router-topk": (1, "a token is routed to at least one expert"),
    "moe-ffn-hidden-size": (1, _WIDTH),
    "moe-shared-expert-intermediate-size": (1, "a shared expert needs at least one channel (none: no shared expert)"),
    "moe-latent-size": (1, _WIDTH),
    "mtp-num-layers": (0, "a layer count is 0 or more (0 or none: no multi-token-prediction layers)"),
    "linear-conv-kernel-dim": (1, "a convolution needs at least one tap"),
    "linear-key-head-dim": (1, _WIDTH),
    "linear-value-head-dim": (1, _WIDTH),
    "linear-num-key-heads": (1, _HEADS),
    "linear-num-value-heads": (1, _HEADS),
    "q-lora-rank": (1, "a low-rank projection needs rank 1 or more (none: no query projection of its own)"),
    "kv-lora-rank": (1, "a low-rank projection needs rank 1 or more"),
    "qk-head-dim": (1, _WIDTH),
    "qk-pos-emb-head-dim": (0, "a channel count is 0 or more"),
    "v-head-dim": (1, _WIDTH),
    "mamba-state-dim": (1, _WIDTH),
    "mamba-head-dim": (1, _WIDTH),
    "mamba-num-groups": (1, "a layer needs at least one group"),
    "mamba-num-heads": (1, _HEADS),
}
"""Megatron flags that count layers, channels, heads or experts: flag -> (smallest value megatron-core 0.19.2 builds a
model with, why). Megatron's parser takes any integer, and its FLOP function multiplies what it is given, so a
``hidden-size=-1`` printed a negative share; 0 is allowed only where megatron-core reads it as "none"."""


def _uses_gdn(flags: Mapping[str, FlagValue]) -> bool:
    """Whether the model of ``flags`` has Gated DeltaNet layers: ``G`` in its layer pattern, or the GPT path's
    ``experimental-attention-variant``."""
    pattern = flags.get("hybrid-layer-pattern")
    return (isinstance(pattern, str) and "G" in pattern) or flags.get("experimental-attention-variant") == "gated_delta_net"


def _grouped_query(flags: Mapping[str, FlagValue]) -> bool:
    """Whether the model of ``flags`` has grouped-query attention: only then does megatron-core read
    ``num-query-groups`` (without it the query heads are the groups)."""
    return bool(flags.get("group-query-attention"))


DIVIDING_FLAGS: tuple[tuple[str, str, Callable[[Mapping[str, FlagValue]], bool], str], ...] = (
    ("num-query-groups", "num-attention-heads", _grouped_query,
     "megatron-core splits the query heads into equal groups, one key/value head each"),
    ("linear-num-key-heads", "linear-num-value-heads", _uses_gdn,
     "megatron-core's Gated DeltaNet shares each key head among an equal number of value heads"),
)
"""(divisor, multiple, whether the model uses the pair, why) of the head counts megatron-core 0.19.2 splits evenly:
attention's ``linear_qkv`` output is viewed as ``groups x (heads / groups + 2)`` heads, which fails for groups that do
not divide the heads (without group-query-attention the groups are the heads); ``TransformerConfig`` asserts the GDN
pair."""


def _layer_pattern(card: ModelCard, given: Mapping[str, FlagValue]) -> FlagValue:
    """The hybrid layer pattern Megatron counts with the overrides ``given`` (dashed names): an explicit
    ``hybrid-layer-pattern``, else the deprecated ``hybrid-override-pattern``, else the card's (``None``: GPT)."""
    pattern = model_flags(card)["hybrid-layer-pattern"]
    if given.get("hybrid-override-pattern") is not None:
        pattern = given["hybrid-override-pattern"]
    return given.get("hybrid-layer-pattern", pattern)


def _whole(value: FlagValue) -> bool:
    """Whether ``value`` is an integer (``True`` is not): the values the checks below judge. Any other value of an
    integer flag is megatron's parser's to refuse, quoting the text as typed."""
    return isinstance(value, int) and not isinstance(value, bool)


def _given_text(given: Mapping[str, FlagValue], names: Sequence[str]) -> str:
    """``NAME=VALUE`` of those of ``names`` the overrides ``given`` set: the flags a refusal names."""
    return " ".join(f"{name}={given[name]}" for name in names if name in given)


def _has_experts(flags: Mapping[str, FlagValue]) -> bool:
    """Whether the model of ``flags`` routes tokens to experts (``num-experts`` above 0; 0 and none are no experts)."""
    experts = flags.get("num-experts")
    return _whole(experts) and experts > 0


SIZE_FLAG_USERS: dict[str, Callable[[Mapping[str, FlagValue]], bool]] = {
    "moe-router-topk": _has_experts,
    "num-query-groups": _grouped_query,
}
"""The :data:`SIZE_FLAGS` megatron-core 0.19.2 reads only for some models -> whether the model of the flags is one: a
dense model never reads its top-k (``TransformerConfig`` takes a 0), and without group-query-attention the query
groups are not passed on (the heads are the groups)."""


def _check_sizes(flags: Mapping[str, FlagValue], given: Mapping[str, FlagValue]) -> None:
    """Raise :class:`FlopError` for an override of :data:`SIZE_FLAGS` below its smallest value, where the model of
    ``flags`` reads it (:data:`SIZE_FLAG_USERS`)."""
    for name, value in given.items():
        if name in SIZE_FLAG_USERS and not SIZE_FLAG_USERS[name](flags):
            continue
        if name in SIZE_FLAGS and _whole(value) and value < SIZE_FLAGS[name][0]:
            minimum, reason = SIZE_FLAGS[name]
            raise FlopError(f"--megatron-flag {name}={value}: {reason}; give {name} >= {minimum}")


def _check_divisors(flags: Mapping[str, FlagValue], given: Mapping[str, FlagValue]) -> None:
    """Raise :class:`FlopError` where an override breaks a pair of :data:`DIVIDING_FLAGS` the model uses, naming the
    divisors the count could take."""
    for divisor, multiple, used, reason in DIVIDING_FLAGS:
        parts, whole = flags.get(divisor), flags.get(multiple)
        if not ({divisor, multiple} & given.keys() and used(flags) and _whole(parts) and _whole(whole)):
            continue
        if parts > 0 and whole > 0 and whole % parts:
            choices = ", ".join(str(n) for n in range(1, whole + 1) if whole % n == 0)
            raise FlopError(f"--megatron-flag {_given_text(given, (divisor, multiple))}: {divisor} {parts} does not "
                            f"divide {multiple} {whole} ({reason}); give {divisor} one of {choices}")


def _check_router_topk(flags: Mapping[str, FlagValue], given: Mapping[str, FlagValue]) -> None:
    """Raise :class:`FlopError` where an override routes a token to more experts than the model has (the router's
    ``torch.topk`` fails on such a run; Megatron's count would multiply the surplus)."""
    topk, experts = flags.get("moe-router-topk"), flags.get("num-experts")
    if ({"moe-router-topk", "num-experts"} & given.keys() and _whole(topk) and _whole(experts)
            and 0 < experts < topk):
        raise FlopError(f"--megatron-flag {_given_text(given, ('moe-router-topk', 'num-experts'))}: moe-router-topk "
                        f"{topk} routes a token to more experts than num-experts {experts}; give moe-router-topk from 1 "
                        f"to {experts}, or num-experts {topk} or more")


def _check_hybrid_experts(flags: Mapping[str, FlagValue], given: Mapping[str, FlagValue]) -> None:
    """Raise :class:`FlopError` where an override leaves no experts (``num-experts`` 0 or none) to a hybrid layer
    pattern with MoE layers (``E``): megatron-core builds each ``E`` as an MoE layer of ``num-experts`` experts, which
    fails without them, while Megatron's hybrid count reads the ``E`` symbols, not the expert count, and printed the
    card's count unchanged."""
    pattern = flags.get("hybrid-layer-pattern")
    if "num-experts" in given and isinstance(pattern, str) and "E" in pattern and flags.get("num-experts") in (0, None):
        experts = "none" if given["num-experts"] is None else given["num-experts"]
        raise FlopError(f"--megatron-flag num-experts={experts}: the hybrid layer pattern's E layers are "
                        "MoE layers, which megatron-core builds with num-experts experts; give num-experts >= 1, or a "
                        "hybrid-layer-pattern without E")


def _check_layer_count(card: ModelCard, given: Mapping[str, FlagValue], pattern: FlagValue) -> None:
    """Raise :class:`FlopError` for a ``num-layers`` override beside a hybrid layer ``pattern`` (the card's, or one
    an override sets), whose symbols decide the layer count, so the override was ignored without a word. Dropping the
    pattern (``hybrid_layer_pattern=None``) makes it count."""
    layers = given.get("num-layers")
    if layers is not None and pattern is not None:
        raise FlopError(f"--megatron-flag num-layers={layers}: Megatron counts {card.name} here as a hybrid model "
                        "(a hybrid layer pattern is set), whose pattern sets the layer count, and ignores num-layers; "
                        "add --megatron-flag hybrid-layer-pattern=none to count a GPT model of that many layers, or "
                        "drop num-layers")


def check_overrides(card: ModelCard, overrides: Mapping[str, FlagValue]) -> None:
    """Raise :class:`FlopError` naming the flag for Megatron flag ``overrides`` of ``card`` that no training run could
    have used, whose count Megatron's FLOP function would print all the same: a size below its smallest value
    (:data:`SIZE_FLAGS`, where the model reads it), head counts that do not split evenly (:data:`DIVIDING_FLAGS`), a
    top-k above the expert count, no experts for a layer pattern's MoE layers, a ``num-layers`` its layer pattern
    overrides. Values megatron-core takes pass; megatron is not imported."""
    given = {name.replace("_", "-"): value for name, value in overrides.items()}
    pattern = _layer_pattern(card, given)
    flags = {**model_flags(card), **given, "hybrid-layer-pattern": pattern}
    _check_sizes(flags, given)
    _check_divisors(flags, given)
    _check_router_topk(flags, given)
    _check_hybrid_experts(flags, given)
    _check_layer_count(card, given, pattern)


def megatron_counts(card: ModelCard) -> bool:
    """Whether megatron-core 0.19.2 has a FLOP formula for ``card``: not for a CKDA hybrid, whose layer it lacks
    (:func:`megatron_namespace` refuses one, and ``oellm flops`` names no Megatron count for it)."""
    return card.linear_mixer != "ckda"


def megatron_namespace(card: ModelCard, seq_length: int, padded_vocab: int,
                       **megatron_overrides: FlagValue) -> argparse.Namespace:
    """The arguments megatron's ``pretrain_gpt`` / ``pretrain_hybrid`` would hand the FLOP function for ``card``.

    Built by Megatron's own parser from :func:`~megatron.oellm.megatron_args.model_flags` plus ``--seq-length``;
    ``megatron_overrides`` replace or add flags (``group_query_attention=False`` drops the flag, ``None`` removes
    one, underscores become dashes); dropping a hybrid card's ``hybrid_layer_pattern`` without a ``num_layers``
    gives the card's decoder layers (a GPT model), not the pattern's length. The deprecated
    ``hybrid_override_pattern`` is the run's layer pattern, as ``validate_args`` reads it (it replaces the card's;
    beside an explicit ``hybrid_layer_pattern`` it is refused, as megatron-core refuses the pair). Of what Megatron
    derives after parsing, the FLOP function reads ``padded_vocab_size`` (set by the tokenizer build, here
    ``padded_vocab``), ``kv_channels`` and ``ffn_hidden_size`` (derived here as ``validate_args`` does when an
    override drops them), ``num_experts`` (0 read as none, as ``validate_args`` reads it) and, for hybrid models, ``num_layers`` (``validate_args`` counts it from
    ``--hybrid-layer-pattern``; the FLOP function counts the pattern itself). CKDA has no megatron-core layer and is
    refused, and so are overrides no training run could have used (:func:`check_overrides`).
    """
    if not megatron_counts(card):
        raise FlopError(f"{card.name}: megatron-core 0.19.2 has no CKDA layer, so it has no FLOP formula for it; "
                        "use the corrected count (drop --megatron-compatible)")
    check_overrides(card, megatron_overrides)
    flags = dict(model_flags(card, vocab_size=padded_vocab))
    flags["seq-length"] = seq_length
    overrides = {name.replace("_", "-"): value for name, value in megatron_overrides.items()}
    legacy_pattern = overrides.pop("hybrid-override-pattern", None)
    if legacy_pattern is not None:
        if overrides.get("hybrid-layer-pattern") is not None:
            raise FlopError("hybrid-override-pattern and hybrid-layer-pattern both given: megatron-core refuses the "
                            "pair (the first is the deprecated name of the second); give the run's pattern once")
        overrides["hybrid-layer-pattern"] = legacy_pattern
    flags.update(overrides)
    if flags.get("hybrid-layer-pattern") is None and "num-layers" not in overrides:
        flags["num-layers"] = card.num_layers  # a GPT model: decoder layers, not the dropped pattern's symbols
    args = parse_megatron_argv(flags_to_argv(flags))
    args.padded_vocab_size = padded_vocab
    _derive_unset_widths(args)
    _read_zero_experts_as_none(args)
    return args


def _read_zero_experts_as_none(args: argparse.Namespace) -> None:
    """``num_experts`` 0 as megatron-core's ``validate_args`` reads it, no experts (every MLP dense): the FLOP function
    tests ``num_experts is None``, and counted a 0 as the card's MoE blocks, routed experts and all."""
    if args.num_experts == 0:
        args.num_experts = None


def _derive_unset_widths(args: argparse.Namespace) -> None:
    """Fill ``kv_channels`` and ``ffn_hidden_size`` where an override left them unset, with the values megatron-core's
    ``validate_args`` gives a run without the flag (hidden / heads; 4 x hidden, or its SwiGLU two-thirds rounded down
    to a multiple of 64): the FLOP function multiplies both, so ``None`` ended in a refusal of a valid run."""
    if args.kv_channels is None and args.hidden_size and args.num_attention_heads:
        if args.hidden_size % args.num_attention_heads:
            raise FlopError(f"kv-channels unset: megatron-core derives it as hidden size / attention heads and refuses "
                            f"{args.hidden_size} / {args.num_attention_heads}; give kv-channels")
        args.kv_channels = args.hidden_size // args.num_attention_heads
    if args.ffn_hidden_size is None and args.hidden_size:
        args.ffn_hidden_size = (8 * args.hidden_size // 3) // 64 * 64 if args.swiglu else 4 * args.hidden_size


def megatron_flops_per_token(card: ModelCard, seq_length: int, padded_vocab: int | None = None,
                             document_lengths: DocumentLengths | None = None,
                             **megatron_overrides: FlagValue) -> float:
    """Training FLOPs per token as megatron-core 0.19.2's ``num_floating_point_operations`` counts them.

    One sequence of ``seq_length`` tokens (packed ``document_lengths`` passed on as Megatron's THD sum of squared
    lengths); see :func:`megatron_namespace` for ``megatron_overrides``.
    """
    if padded_vocab is not None and padded_vocab <= 0:
        raise FlopError(f"padded_vocab must be positive, got {padded_vocab} (or leave it out for the card's)")
    from megatron.training.training import num_floating_point_operations

    padded_vocab = padded_vocab or pad_vocab(card.vocab_size)
    args = megatron_namespace(card, seq_length, padded_vocab, **megatron_overrides)
    lengths = document_lengths_list(seq_length, document_lengths)
    total = num_floating_point_operations(args, 1, seqlen_squared_sum_in_batch=sum(n * n for n in lengths),
                                          total_real_tokens_in_batch=seq_length)
    return total / seq_length
