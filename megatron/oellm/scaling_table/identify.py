"""The model and vocabulary of a run from its logged arguments: which card it is (or a card rebuilt from
them), the key rows are grouped by, and our FLOP count per token for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Sequence

from megatron.oellm.cards import PUBLISHED_CARDS, CardError, ModelCard, get_card
from megatron.oellm.flops import megatron_padded_vocab, training_flops_per_token
from megatron.oellm.run_log import Run
from megatron.oellm.scaling_table.rows import is_positive_int

_IDENTITY_EXCLUDED = {"name", "sources", "hf_architecture", "vocab_size", "seq_length", "max_position_embeddings",
                      "num_layers", "moe_aux_loss_coeff", "moe_router_load_balancing_type"}
"""Card fields that do not identify a model (training choices, vocabulary, depth of a proxy)."""


NO_CARD_HERE = "(no card here)"
"""The mark after a logged ``--oellm-model`` that names no card of this release, shown when the arguments block
matches no registry card either, or describes none (see :func:`identify_model`)."""


def identify_model(args: dict) -> tuple[str, ModelCard | None]:
    """(display name, card) of a run: ``--oellm-model`` if logged and a card of this release, else the card rebuilt
    from Megatron's flags and named after the registry card it matches (a proxy if only the depth differs);
    ('unknown model', None) else. A logged name this release has no card for (a log of a newer release, a card
    renamed since) is rebuilt from the flags like a run without one: it read "unknown model" without TFLOP/s or MFU,
    though its block describes the model. When the block matches no registry card either, the row shows the logged
    name marked ``NAME (no card here)`` rather than ``unregistered model`` or ``unknown model``, which lost it; two
    such models are still told apart by :func:`model_key`, which reads the architecture, not the name. An unnamed
    ``unregistered model`` a few fields away from one registry card says which (:func:`nearest_card_note`)."""
    vocab, name = args.get("vocab_size"), args.get("oellm_model")
    if name and not isinstance(name, str):  # a garbled block can print a number or list
        return "unknown model", None
    if name:
        try:
            card = get_card(name)
        except CardError:
            card = None
        if card is not None:
            return card.name, card.with_vocab(vocab) if isinstance(vocab, int) else card
    display, card = _rebuilt_card(args)
    if name and (card is None or display == UNREGISTERED):
        return f"{name} {NO_CARD_HERE}", card
    if display == UNREGISTERED:
        return display + nearest_card_note(card, args), card
    return display, card


def _rebuilt_card(args: dict) -> tuple[str, ModelCard | None]:
    """(registry name, card) of the card rebuilt from Megatron's flags in ``args`` (:func:`registry_name`), or
    ('unknown model', None) when they describe no card (missing or garbled sizes)."""
    from megatron.oellm.training.card_from_args import card_from_megatron_args

    try:
        card = card_from_megatron_args(argparse.Namespace(**args))
    except (ValueError, TypeError, AttributeError, KeyError):
        return "unknown model", None
    if not whole_sizes(card):
        return "unknown model", None
    return registry_name(card), card


def whole_sizes(card: ModelCard) -> bool:
    """Every size of ``card`` (a field that is an integer in the registry's cards) is a non-negative integer: a card
    rebuilt from a block whose value another rank's output cut into (``512[rank3]: W...``) carries that text, which
    the FLOP count cannot add."""
    return all(_non_negative_int(getattr(card, name)) for name in _size_fields())


def _non_negative_int(value: object) -> bool:
    """``value`` is an integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@functools.cache
def _size_fields() -> tuple[str, ...]:
    """The :class:`ModelCard` fields that hold an integer (not a bool) in every registry card; computed once."""
    return tuple(f.name for f in dataclasses.fields(ModelCard)
                 if all(_non_negative_int(getattr(card, f.name)) for card in PUBLISHED_CARDS.values()))


ARCHITECTURE_ARGUMENTS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_layer_freq", "moe_shared_expert_intermediate_size",
    "hybrid_layer_pattern", "experimental_attention_variant", "linear_attention_freq", "multi_latent_attention",
    "mtp_num_layers", "swiglu", "vocab_size")
"""Megatron arguments that tell apart two models no card describes (both ``unknown model``)."""


def model_key(args: dict, card: ModelCard | None) -> str:
    """What makes two rows the same model: the card's architecture (its depth included), else the architecture
    arguments of the block. The display names do not: every model that matches no registry card is ``unregistered
    model`` (some with the note of a nearest card), every one no card describes ``unknown model`` (either ``NAME (no card here)`` when its log names a card
    this release lacks, and two different models can log one name), and rows of two such models are no scaling
    series."""
    if card is not None:
        return repr(sorted((f.name, getattr(card, f.name)) for f in dataclasses.fields(card)
                           if f.name not in _IDENTITY_EXCLUDED or f.name == "num_layers"))
    return repr([(name, args.get(name)) for name in ARCHITECTURE_ARGUMENTS])


_FITTED_EXPERT_FIELDS = ("num_experts", "moe_router_topk")
"""What ``oellm recipe --local`` changes of a card besides its depth (``[local] num_experts``, the top-k capped to
it): a card that differs from a registry card only there is that card's local fit."""


UNREGISTERED = "unregistered model"
"""The name of a model whose card, rebuilt from a log's arguments, matches no registry card (:func:`registry_name`)."""


def _identity(card: ModelCard, ignored: tuple[str, ...] = ()) -> dict:
    """The fields of ``card`` that identify a model (none of :data:`_IDENTITY_EXCLUDED` or ``ignored``)."""
    return {f.name: getattr(card, f.name) for f in dataclasses.fields(card)
            if f.name not in _IDENTITY_EXCLUDED and f.name not in ignored}


def _depth_name(published: ModelCard, card: ModelCard) -> str:
    """``published``'s name for a model of its architecture at ``card``'s depth: ``<model>`` or
    ``<model>-proxy-<N>L``."""
    return published.name if published.num_layers == card.num_layers else f"{published.name}-proxy-{card.num_layers}L"


def registry_name(card: ModelCard) -> str:
    """The registry name ``card`` matches (``<model>`` or ``<model>-proxy-<N>L``; with ``, <E> experts`` added for
    a ``--local`` fit with fewer experts), else :data:`UNREGISTERED`."""
    exact, fitted = _identity(card), _identity(card, _FITTED_EXPERT_FIELDS)
    for published in PUBLISHED_CARDS.values():
        if _identity(published) == exact:
            return _depth_name(published, card)
    for published in PUBLISHED_CARDS.values():
        if _identity(published, _FITTED_EXPERT_FIELDS) == fitted:
            return f"{_depth_name(published, card)}, {card.num_experts} experts"
    return UNREGISTERED


NEAREST_CARD_FIELDS = 2
"""The most identity fields in which a card rebuilt from a log may differ from its nearest registry card for the
row to name that card and the fields (:func:`nearest_card_note`): more is another model, not a changed flag."""


GQA_OFF = "group_query_attention False"
"""How :func:`nearest_card_note` names a run without ``--group-query-attention``: megatron-core 0.19.2 then builds
(and counts) multi-head attention whatever ``--num-query-groups`` says, so its card has a K/V head per query head."""


def nearest_card_note(card: ModelCard, args: dict) -> str:
    """`` (NAME but FIELD VALUE, ...)``: the registry card that ``card`` (rebuilt from the arguments ``args``, matching
    none) differs from in the fewest identity fields, named at ``card``'s depth (:func:`_depth_name`), and those
    fields with ``card``'s values, where that card is the only one so near and they are at most
    :data:`NEAREST_CARD_FIELDS`; '' else. A report-style run built without ``--group-query-attention`` read
    ``unregistered model`` with nothing to say that one flag set it apart from ``qwen3-30b-a3b``."""
    differing = {published.name: (published, _differing_fields(card, published))
                 for published in PUBLISHED_CARDS.values()}
    fewest = min(len(fields) for _, fields in differing.values())
    nearest = [(published, fields) for published, fields in differing.values() if len(fields) == fewest]
    if len(nearest) != 1 or not 0 < fewest <= NEAREST_CARD_FIELDS:
        return ""
    published, fields = nearest[0]
    return f" ({_depth_name(published, card)} but {', '.join(_field_text(name, card, args) for name in fields)})"


def _differing_fields(card: ModelCard, published: ModelCard) -> list[str]:
    """The identity fields (:func:`_identity`) in which ``card`` differs from ``published``, in field order."""
    theirs = _identity(published)
    return [name for name, value in _identity(card).items() if value != theirs[name]]


def _field_text(name: str, card: ModelCard, args: dict) -> str:
    """``NAME VALUE`` of ``card``'s field ``name``, or :data:`GQA_OFF` for the query groups of a run whose arguments
    ``args`` turn grouped-query attention off (the flag, not the groups it ignores, is what to check)."""
    if name == "num_query_groups" and args.get("group_query_attention") is False:
        return GQA_OFF
    return f"{name} {getattr(card, name)}"


def corrected_flops_per_token(card: ModelCard, seq_length: int, padded_vocab: int) -> float:
    """Training FLOPs per token of our accounting (:func:`megatron.oellm.flops.training_flops_per_token`)."""
    return training_flops_per_token(card, seq_length, padded_vocab=padded_vocab).total


VOCAB_ARGUMENTS = ("vocab_size", "make_vocab_size_divisible_by", "tensor_model_parallel_size")
"""The arguments our FLOP count reads to pad the vocabulary as Megatron does."""


def garbled_integer_problem(args: dict, names: Sequence[str]) -> str:
    """What is wrong with the first of ``names`` that is given (not None) but is no positive integer, e.g. a value
    that another rank's output cut into; '' when all are fine."""
    for name in names:
        value = args.get(name)
        if value is not None and not is_positive_int(value):
            return f"arguments block has a {name} that is no positive integer: {str(value)[:40]!r}"
    return ""


def run_arguments(run: Run) -> dict:
    """The run's arguments, ``vocab_size`` taken from megatron's ``padded vocab`` line when the block has none: a run
    whose tokenizer sets the vocabulary (no ``--vocab-size``) prints the block before building it, and without the
    vocabulary neither can its card be rebuilt nor its FLOPs counted."""
    if run.args.get("vocab_size") is None and run.vocabulary is not None:
        return {**run.args, "vocab_size": run.vocabulary[0]}
    return run.args


def logged_padded_vocab(args: dict) -> int | None:
    """The output layer's vocabulary as Megatron pads it (to ``make_vocab_size_divisible_by`` x tensor-parallel
    size; None when the arguments give no vocabulary size). The values must have passed
    :func:`garbled_integer_problem`."""
    if args.get("vocab_size") is None:
        return None
    return megatron_padded_vocab(args["vocab_size"], args.get("tensor_model_parallel_size") or 1,
                                 args.get("make_vocab_size_divisible_by"))
