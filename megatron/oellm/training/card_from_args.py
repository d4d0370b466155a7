"""A model card read back from Megatron's architecture flags: the entry's answer to runs without ``--oellm-model``.

Experiment YAMLs and recipes may describe the model with Megatron's flags alone (as for ``pretrain_gpt.py`` /
``pretrain_hybrid.py``). The spec builders and the FLOP accounting take a card, so the card is rebuilt from the
parsed flags: a hybrid layer pattern with Gated DeltaNet layers (``G``) is the Qwen3.5 family, and so is a GPT model
with ``--experimental-attention-variant gated_delta_net`` and ``--linear-attention-freq`` (megatron-core's other way
to build Qwen3.5); a plain MoE GPT is the Qwen3 MoE family. It is the inverse of
:func:`megatron.oellm.megatron_args.model_flags`. Flags that change the architecture in a way no card describes
(dense layers between the MoE ones, multi-latent attention, multi-token prediction, ...) are refused rather than
ignored, so that neither a model nor a FLOP count is built for another architecture than the run's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from megatron.oellm.cards import HYBRID_SYMBOLS, ModelCard
from megatron.oellm.megatron_args import every_layer_moe

FLAGS_CARD_NAME = "from-megatron-flags"
"""Name of a card rebuilt from flags (it is in no registry)."""


def _single(value: Any) -> Any:
    """Megatron parses some MoE flags as per-layer lists; a card holds one value."""
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise ValueError(f"per-layer values {value} cannot be expressed by a model card; give one value")
        return value[0]
    return value


def mixer_period(pattern: str) -> tuple[str, int]:
    """(linear mixer name, full-attention interval) of a hybrid pattern of one mixer + ``E`` per decoder layer."""
    body = pattern.split("/")[0].replace("|", "")
    mixers = body[0::2]
    if body[1::2] != HYBRID_SYMBOLS["moe"] * len(mixers) or len(body) % 2:
        raise ValueError(f"hybrid layer pattern {pattern!r} is not one mixer followed by E (MoE) per layer")
    symbol_to_mixer = {symbol: name for name, symbol in HYBRID_SYMBOLS.items() if name != "moe"}
    unknown = set(mixers) - set(symbol_to_mixer)
    if unknown:
        raise ValueError(f"hybrid layer pattern {pattern!r} has layer symbols {sorted(unknown)} no card family "
                         f"builds (known mixers: {symbol_to_mixer})")
    linear = {symbol_to_mixer[m] for m in mixers} - {"attention"}
    if len(linear) != 1 or HYBRID_SYMBOLS["attention"] not in mixers:
        raise ValueError(f"hybrid layer pattern {pattern!r} must mix exactly one linear mixer with attention")
    interval = mixers.index(HYBRID_SYMBOLS["attention"]) + 1
    expected = "".join(HYBRID_SYMBOLS["attention"] if (i + 1) % interval == 0 else mixers[0]
                       for i in range(len(mixers)))
    if mixers != expected:
        raise ValueError(f"hybrid layer pattern {pattern!r} is not periodic (every {interval}th layer attention)")
    return linear.pop(), interval


def linear_attention_interval(freq: int | list | None, num_layers: int) -> int:
    """The full-attention interval of Megatron's ``--linear-attention-freq`` (N: every Nth layer softmax attention,
    the others linear; a list: 1 = linear, 0 = softmax attention per layer), which must be periodic."""
    if isinstance(freq, int) and not isinstance(freq, bool) and freq >= 2:
        return freq
    if isinstance(freq, list) and 0 in freq:
        interval = freq.index(0) + 1
        if freq == [0 if (i + 1) % interval == 0 else 1 for i in range(num_layers)]:
            return interval
    raise ValueError(f"--linear-attention-freq {freq!r} is not 'every Nth layer softmax attention' (N >= 2) over "
                     f"the {num_layers} layers, the one layer mix a model card describes")


_UNEXPRESSIBLE: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("moe_layer_freq", every_layer_moe, "dense layers between the MoE layers"),
    ("multi_latent_attention", lambda value: not value, "multi-latent attention"),
    ("mtp_num_layers", lambda value: not value, "multi-token prediction layers"),
    ("experimental_attention_variant", lambda value: value in (None, "gated_delta_net"),
     "an attention variant other than gated_delta_net"),
    ("heterogeneous_layers_config_path", lambda value: value is None, "per-layer (heterogeneous) configurations"),
    ("heterogeneous_layers_config_encoded_json", lambda value: value is None,
     "per-layer (heterogeneous) configurations"),
    ("window_size", lambda value: value is None, "sliding-window attention"),
    ("swiglu", lambda value: value is not False, "an MLP without SwiGLU"),
    ("add_bias_linear", lambda value: value is not True, "biases on the linear layers"),
    ("add_qkv_bias", lambda value: value is not True, "biases on the query/key/value projections"),
    ("normalization", lambda value: value in (None, "RMSNorm"), "a normalization other than RMSNorm"),
    ("position_embedding_type", lambda value: value in (None, "rope"), "position embeddings other than RoPE"),
    ("use_rope_scaling", lambda value: not value, "RoPE frequency scaling"),
    ("rotary_seq_len_interpolation_factor", lambda value: value in (None, 1), "RoPE position interpolation"),
    ("rotary_interleaved", lambda value: not value, "interleaved RoPE"),
    ("qk_l2_norm", lambda value: not value, "L2-normalised queries and keys"),
    ("softmax_type", lambda value: value in (None, "vanilla"), "an attention softmax with an offset or sink"),
    ("apply_residual_connection_post_layernorm", lambda value: not value, "residual connections after the norm"),
    ("moe_latent_size", lambda value: value is None, "latent projections around the routed experts"),
    ("moe_router_score_function", lambda value: value in (None, "softmax"), "a router score other than softmax"),
    ("moe_router_topk_scaling_factor", lambda value: value in (None, 1), "scaled routing weights"),
    ("moe_router_num_groups", lambda value: value is None, "group-limited routing"),
    ("moe_router_group_topk", lambda value: value is None, "group-limited routing"),
)
"""(Megatron argument, test of a value a card describes, what another value means): flags whose other values build
an architecture no card family has. A missing argument (a log of another Megatron version) is not refused."""


_REFUSED_AS = {"add_bias_linear": "no --disable-bias-linear"}
"""How a refusal names an argument whose flag has another name (a ``store_false`` flag's default)."""


def _refused_flag(name: str, value: Any) -> str:
    """How a refusal names argument ``name`` with ``value``: ``--flag value``, or :data:`_REFUSED_AS`'s text."""
    return _REFUSED_AS.get(name) or f"--{name.replace('_', '-')} {value!r}"


MTP_ARGS = ("mtp_num_layers",)
"""Arguments of :data:`_UNEXPRESSIBLE` that add multi-token prediction: a head beside the model, not a change of it.
A checkpoint export drops that head (``mcore-to-hf``), so it passes them."""


def inexpressible_flags(args: argparse.Namespace, *, allow_mtp: bool = False) -> list[str]:
    """``--flag value (meaning)`` for each of :data:`_UNEXPRESSIBLE`'s flags in ``args`` whose value no card
    describes, and a hybrid pattern's multi-token-prediction part; ``allow_mtp`` leaves out multi-token prediction
    (:data:`MTP_ARGS` and the pattern's ``/`` part), for a reader that drops that head."""
    refused = [f"{_refused_flag(name, getattr(args, name))} ({meaning})" for name, describable, meaning in _UNEXPRESSIBLE
               if hasattr(args, name) and not describable(getattr(args, name))
               and not (allow_mtp and name in MTP_ARGS)]
    pattern = getattr(args, "hybrid_layer_pattern", None)
    if isinstance(pattern, str) and "/" in pattern and not allow_mtp:
        refused.append(f"--hybrid-layer-pattern {pattern!r} (multi-token prediction layers after '/')")
    return refused


CARD_SCOPE = ("the cards are decoder-only MoE models with softmax attention, optionally mixed with one linear mixer, "
              "without MTP")
"""What every model card describes: the reason given beside a refusal of :func:`inexpressible_flags`."""


def check_expressible(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming each of :data:`_UNEXPRESSIBLE`'s flags whose value no card describes."""
    refused = inexpressible_flags(args)
    if refused:
        raise ValueError(f"no model card describes these Megatron flags: {'; '.join(refused)} ({CARD_SCOPE})")


def _linear_fields(args: argparse.Namespace) -> tuple[str, int, dict]:
    """(family, decoder layers, linear-mixer card fields) of the parsed flags: a hybrid pattern, the GPT path's
    Gated DeltaNet (``--experimental-attention-variant gated_delta_net``) or plain softmax attention."""
    if args.hybrid_layer_pattern:
        linear_mixer, interval = mixer_period(args.hybrid_layer_pattern)
        num_layers = len(args.hybrid_layer_pattern.split("/")[0].replace("|", "")) // 2
    elif getattr(args, "experimental_attention_variant", None) == "gated_delta_net":
        linear_mixer, num_layers = "gdn", args.num_layers
        interval = linear_attention_interval(args.linear_attention_freq, num_layers)
    else:
        return "qwen3_moe", args.num_layers, {}
    fields = dict(
        linear_mixer=linear_mixer, full_attention_interval=interval,
        linear_num_key_heads=args.linear_num_key_heads, linear_num_value_heads=args.linear_num_value_heads,
        linear_key_head_dim=args.linear_key_head_dim, linear_value_head_dim=args.linear_value_head_dim,
        linear_conv_kernel_dim=args.linear_conv_kernel_dim)
    return ("qwen3_5" if linear_mixer == "gdn" else "ckda_hybrid"), num_layers, fields


def card_from_megatron_args(args: argparse.Namespace, name: str = FLAGS_CARD_NAME) -> ModelCard:
    """The card that Megatron's parsed architecture flags describe (raises ``ValueError`` naming what is missing
    or what no card describes)."""
    if not args.num_experts:
        raise ValueError("without --oellm-model the model is read from Megatron's flags, and the card families are "
                         "MoE models: give --num-experts (or --oellm-model NAME)")
    check_expressible(args)
    vocab_size = args.vocab_size or getattr(args, "padded_vocab_size", None)  # the tokenizer's, once megatron built it
    if not vocab_size:
        raise ValueError("without --oellm-model the model is read from Megatron's flags, and neither they nor a built "
                         "tokenizer name a vocabulary: give --vocab-size (or --oellm-model NAME)")
    family, num_layers, linear_fields = _linear_fields(args)
    query_groups = args.num_query_groups if args.group_query_attention else args.num_attention_heads
    return ModelCard(
        name=name,
        family=family,
        num_layers=num_layers,
        hidden_size=args.hidden_size,
        vocab_size=vocab_size,
        num_attention_heads=args.num_attention_heads,
        num_query_groups=query_groups,
        kv_channels=args.kv_channels or args.hidden_size // args.num_attention_heads,
        qk_layernorm=args.qk_layernorm,
        attention_output_gate=args.attention_output_gate,
        rotary_percent=args.rotary_percent,
        rotary_base=float(args.rotary_base),
        num_experts=args.num_experts,
        moe_ffn_hidden_size=args.moe_ffn_hidden_size or args.ffn_hidden_size,
        moe_router_topk=args.moe_router_topk,
        moe_aux_loss_coeff=float(_single(args.moe_aux_loss_coeff)),
        moe_router_load_balancing_type=_single(args.moe_router_load_balancing_type),
        moe_router_pre_softmax=args.moe_router_pre_softmax,
        moe_shared_expert_intermediate_size=args.moe_shared_expert_intermediate_size or 0,
        moe_shared_expert_gate=args.moe_shared_expert_gate,
        norm_epsilon=args.layernorm_epsilon,
        zero_centered_norm=args.layernorm_zero_centered_gamma,
        untie_embeddings=args.untie_embeddings_and_output_weights,
        max_position_embeddings=args.max_position_embeddings,
        seq_length=args.seq_length or ModelCard.seq_length,
        **linear_fields,
    )
