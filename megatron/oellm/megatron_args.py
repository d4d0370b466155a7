"""Model cards as Megatron-LM command-line arguments, and Megatron's own parser to read them back.

Recipes emit these flags (so experiment YAMLs that map keys one-to-one onto Megatron flags keep working), the
training entry parses them, and the FLOP accounting's megatron-compatible mode feeds the parsed namespace to
megatron's own FLOP function. The flag names are megatron-core 0.19.2's (``megatron.training.arguments``).
"""

from __future__ import annotations

import argparse
import decimal
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from megatron.oellm.cards import ModelCard

FlagValue = bool | int | float | str | Sequence[Any] | None


def megatron_flag(destination: str) -> str:
    """Megatron's command-line flag of the argument ``destination`` (``delay_wgrad_compute`` ->
    ``--delay-wgrad-compute``), for messages that name the flag a user wrote."""
    return "--" + destination.replace("_", "-")


def every_layer_moe(moe_layer_freq: int | Sequence[int] | None) -> bool:
    """Megatron's ``--moe-layer-freq`` (None: not set) puts an MoE block in every layer: 1, or a list of ones.

    Every card's model is all-MoE, so the card read back from flags and the spec builders refuse any other value."""
    return moe_layer_freq in (None, 1) or (isinstance(moe_layer_freq, (list, tuple)) and set(moe_layer_freq) == {1})


def model_flags(card: ModelCard, vocab_size: int | None = None) -> dict[str, FlagValue]:
    """Megatron flags (name without ``--`` -> value) that define ``card``'s architecture.

    ``vocab_size`` overrides the card's vocabulary (e.g. the 262,144 padded OEL vocabulary). Hybrid families
    (a linear mixer) get ``--hybrid-layer-pattern``; the others are GPT models. ``None`` (and ``False``) marks an
    architecture flag the card leaves unset (no shared expert, no hybrid pattern, no GPT-path attention variant):
    it renders to nothing, and the training entry refuses it beside the card's name.
    """
    flags: dict[str, FlagValue] = {
        "num-layers": card.num_layers,
        "hidden-size": card.hidden_size,
        "ffn-hidden-size": card.moe_ffn_hidden_size,
        "num-attention-heads": card.num_attention_heads,
        "group-query-attention": card.num_query_groups != card.num_attention_heads,
        "num-query-groups": card.num_query_groups,
        "kv-channels": card.kv_channels,
        "qk-layernorm": card.qk_layernorm,
        "attention-output-gate": card.attention_output_gate,
        "position-embedding-type": "rope",
        "rotary-percent": card.rotary_percent,
        "rotary-base": int(card.rotary_base),
        "normalization": "RMSNorm",
        "norm-epsilon": card.norm_epsilon,
        "apply-layernorm-1p": card.zero_centered_norm,
        "swiglu": True,
        "disable-bias-linear": True,
        "untie-embeddings-and-output-weights": card.untie_embeddings,
        "max-position-embeddings": card.max_position_embeddings,
        "vocab-size": vocab_size or card.vocab_size,
        "num-experts": card.num_experts,
        "moe-ffn-hidden-size": card.moe_ffn_hidden_size,
        "moe-router-topk": card.moe_router_topk,
        "moe-router-pre-softmax": card.moe_router_pre_softmax,
        "moe-router-load-balancing-type": card.moe_router_load_balancing_type,
        "moe-aux-loss-coeff": card.moe_aux_loss_coeff,
        "moe-grouped-gemm": True,
        "moe-shared-expert-intermediate-size": card.moe_shared_expert_intermediate_size or None,
        "moe-shared-expert-gate": card.moe_shared_expert_gate,
        "experimental-attention-variant": None,  # GDN layers come from the hybrid pattern, not the GPT path
    }
    if card.linear_mixer == "none":
        flags["hybrid-layer-pattern"] = None
    else:
        # megatron-core counts hybrid layers (mixer and MoE block each one): --num-layers is the pattern's length,
        # which validate_args would otherwise overwrite with a warning.
        flags["num-layers"] = len(card.hybrid_layer_pattern)
        flags["hybrid-layer-pattern"] = card.hybrid_layer_pattern
        flags.update({
            "linear-conv-kernel-dim": card.linear_conv_kernel_dim,
            "linear-key-head-dim": card.linear_key_head_dim,
            "linear-value-head-dim": card.linear_value_head_dim,
            "linear-num-key-heads": card.linear_num_key_heads,
            "linear-num-value-heads": card.linear_num_value_heads,
        })
    return flags


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's own test (Python < 3.13) for a token starting with ``-`` that is a value, not an option."""


def _reads_as_option(text: str) -> bool:
    """Whether argparse takes token ``text`` for an option: it starts with ``-``, is longer than ``-`` alone, has no
    space and is not a plain negative number (``-inf``, ``-1e-05`` and ``-name`` are options to argparse)."""
    return len(text) > 1 and text.startswith("-") and " " not in text and not _NEGATIVE_NUMBER.match(text)


def _value_text(value: Any) -> str:
    """``value`` as one argv token; a finite negative float in positional notation (``-1e-05`` -> ``-0.00001``),
    because argparse (Python < 3.13) reads a token starting with ``-`` that is not ``-N`` / ``-N.N`` as an option."""
    text = str(value)
    if isinstance(value, float) and math.isfinite(value) and _reads_as_option(text):
        return format(decimal.Decimal(text), "f")
    return text


def _list_texts(name: str, values: Sequence[Any]) -> list[str]:
    """The tokens of list flag ``--name``; raises ``ValueError`` for an element that is not a number or a string (a
    nested list, a table, a date, a boolean would reach Megatron as its Python text, ``"['a']"``), or that argparse
    would read as an option (``-inf``, ``-text``): a list is written as separate tokens, so no ``--name=value`` form
    can carry it."""
    unwritable = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float, str))]
    if unwritable:
        raise ValueError(f"--{name}: list values {unwritable!r} are not numbers or strings, and Megatron would read "
                         "each as its Python text; write the values as one flat array of numbers or strings, e.g. "
                         f"{name} = [\"a\", \"b\"]")
    texts = [_value_text(v) for v in values]
    unreadable = [text for text in texts if _reads_as_option(text)]
    if unreadable:
        raise ValueError(f"--{name}: list values {unreadable} cannot be written as separate argv tokens (argparse "
                         "reads a token starting with '-' that is not a plain negative number as an option)")
    return texts


def flags_to_argv(flags: Mapping[str, FlagValue]) -> list[str]:
    """Render flags as an argv list: ``True`` -> bare flag, ``False``/``None`` -> omitted, lists -> several values.

    A single value argparse would take for an option (``-inf``, a string starting with ``-``) is attached as
    ``--name=value``, the one form in which argparse reads it as the flag's value."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            argv += [f"--{name}", *_list_texts(name, value)]
        else:
            text = _value_text(value)
            argv += [f"--{name}={text}"] if _reads_as_option(text) else [f"--{name}", text]
    return argv


def megatron_parser(extra_args_provider: Callable[[argparse.ArgumentParser], argparse.ArgumentParser] | None = None,
                    ) -> argparse.ArgumentParser:
    """megatron-core 0.19.2's own argument parser (plus ``extra_args_provider``), without validation side effects."""
    # megatron.oellm's __init__ (already imported as our parent package) applied the typing.override provision.
    from megatron.training.arguments import add_megatron_arguments

    parser = argparse.ArgumentParser(description="Megatron-LM arguments", allow_abbrev=False)
    parser = add_megatron_arguments(parser)
    escape_unformattable_help(parser)
    return extra_args_provider(parser) if extra_args_provider else parser


def escape_unformattable_help(parser: argparse.ArgumentParser) -> list[str]:
    """Double the ``%`` of every help text argparse cannot format; return the options changed.

    argparse expands ``%(default)s``-style fields in help texts, so a bare ``%`` makes ``--help`` raise
    ``ValueError`` for the whole parser. megatron-core 0.19.2 has one (``--moe-paged-stash-buffer-size-factor-cuda``:
    "... 1.10 = 10%)."), which turned the training entry's ``--help`` into a traceback (patches/help-percent-sign.md).
    """
    formatter = parser._get_formatter()
    changed = []
    for action in parser._actions:
        if not action.help or "%" not in action.help:
            continue
        try:
            formatter._expand_help(action)
        except (ValueError, TypeError, KeyError):
            action.help = action.help.replace("%", "%%")
            changed.extend(action.option_strings)
    return changed


def parse_megatron_argv(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` with Megatron's parser only (no ``validate_args``): what Megatron would read from it."""
    return megatron_parser().parse_args(list(argv))


RENAMED_DESTINATIONS: dict[str, str] = {
    "--norm-epsilon": "layernorm_epsilon",
    "--apply-layernorm-1p": "layernorm_zero_centered_gamma",
    "--disable-bias-linear": "add_bias_linear",
}
"""The card flags (:func:`megatron.oellm.megatron_args.model_flags`) whose destination in megatron-core 0.19.2's
parser is not the flag's own name; a unit test compares every card flag's :func:`flag_destination` with the
parser's."""


def flag_destination(flag: str) -> str:
    """The name megatron's parser stores option ``flag`` (``--norm-epsilon``) under, and so the name a checkpoint's
    stored run arguments give it (``layernorm_epsilon`` in megatron-core 0.19.2): :data:`RENAMED_DESTINATIONS`, else
    the flag's own name. Spelt rather than read from :func:`~megatron.oellm.training.args.oellm_parser`, whose
    construction takes seconds that ``oellm convert`` would spend on each export; kept here, beside the card flags, so
    that reading a checkpoint's stored arguments imports no megatron-core (whose import warns on a CPU node)."""
    return RENAMED_DESTINATIONS.get(flag, flag.removeprefix("--").replace("-", "_"))
