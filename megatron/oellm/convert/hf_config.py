"""The Hugging Face ``config.json`` / ``generation_config.json`` of a checkpoint: read, checked against the card.

``hf-to-mcore`` checks the source's ``config.json`` against the card and keeps both files, verbatim, with the
megatron checkpoint; ``mcore-to-hf`` writes them back (or those of ``--hf-config``) after the same check, so the
token ids, generation settings and every other field the card does not describe survive the round trip. A
multimodal ``config.json`` (the language model under ``text_config``) is written back as the text model's config
(:func:`text_model_config`), since the export holds the language model alone.

The check reads ``config.json`` (its ``text_config`` when nested, as in the published multimodal Qwen3.5) the way
transformers does (``from_dict`` of the family's config class: ``rope_theta`` may sit at the top level or in
``rope_parameters``, ``num_experts`` is an alias on Qwen3-MoE) and compares it with the card's config:
``model_type`` (first, so that a checkpoint of another family is refused on that alone; required in a text model's
config, which is written back verbatim, with ``architectures`` naming the card's causal-LM class where stated), the
shape fields below as transformers reads them, stated or not (a field left out takes the config class's default, or is
derived from stated ones: layer types, head size; the config is kept and written back, so a default that is not the
card's would make an export ``from_pretrained`` refuses, or one that computes otherwise), the RoPE settings
the card's config states (type, base, rotated fraction; the fraction, where it states none, as full rotation, which is
what transformers computes without one), the activation, and the fields the card cannot change
(sliding window, attention bias, dense-MLP layers) as read. A multimodal config's top-level fields that describe its
language model (``tie_word_embeddings``, token ids) count where ``text_config`` lacks them or states them as null, as
in the export. A quantized checkpoint's config (``quantization_config``) is refused first, naming its method, and
RoPE scaling (YaRN's ``rope_scaling``) as an inference-time setting, alone or beside the other contradictions.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from megatron.oellm.cards import PUBLISHED_CARDS, CardError, ModelCard, get_card, tiny
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.vocab_padding import vocab_size_fix

if TYPE_CHECKING:
    from transformers import PretrainedConfig

CONFIG_NAME = "config.json"
GENERATION_CONFIG_NAME = "generation_config.json"
CONFIG_FILES = (CONFIG_NAME, GENERATION_CONFIG_NAME)
_SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "head_dim", "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
               "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
               "linear_conv_kernel_dim", "layer_types", "tie_word_embeddings", "num_experts_per_tok",
               "norm_topk_prob", "rms_norm_eps")
"""Fields compared as transformers reads them, stated or not, where the card's config class has them: a config that
leaves one out gets the class default (Qwen3-MoE's ``norm_topk_prob=False``, its experts 768 wide) or a value derived
from other fields (:func:`_effective`), and the HF model then computes what the card does not, or does not load the
tensors. A field the checkpoint states (under its name or the config class's alias) that the class lacks is compared
too."""
_TENSOR_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_experts", "moe_intermediate_size",
                     "shared_expert_intermediate_size", "linear_conv_kernel_dim")
"""Fields of :data:`_SHAPE_KEYS` that tensor sizes alone give (rows, widths, counts, the kernel): a config stating
another value for one while every tensor has the card's shape contradicts its own weights."""
_DERIVED_KEYS = ("sliding_window", "attention_bias", "mlp_only_layers", "decoder_sparse_step")
"""Fields compared as transformers derives them, stated or not: each changes what the HF model computes (Qwen3-MoE's
``use_sliding_window`` switches on a 4096-token window, which its ``sliding_window`` only shows once read), and the
card has no way to express another value. Skipped where the card's config class has no such field (its model
does not read it)."""
_ROPE_DEFAULTS = {"partial_rotary_factor": 1.0}
"""RoPE settings transformers' RoPE functions take where ``rope_parameters`` leaves them out (all of the head rotated),
compared for every card at that value where its config states none: Qwen3-MoE's states no fraction, so a config
rotating part of each head (a different model) was accepted, its fraction unread."""
_MISSING = object()
"""Stands for a field a config object does not have (the card's config class may lack one the checkpoint states)."""


def read_config_files(directory: Path) -> dict[str, str]:
    """File name -> text of the :data:`CONFIG_FILES` present in ``directory``; each must hold a JSON object. One
    that exists but is no file (a folder, a FIFO) or is a symbolic link to nothing (a Hugging Face cache snapshot's
    link to a deleted blob, a loop of links) is refused: skipped as missing, a conversion went on without it,
    checking the weights by tensor shapes only, and said only that there was none."""
    texts = {}
    for name in CONFIG_FILES:
        path = directory / name
        if not path.is_file():
            if path.is_symlink() and not path.exists():
                raise ConversionError(f"{path} is a symbolic link to nothing (its target {os.readlink(path)!r} is "
                                      f"missing, or the links loop), not the JSON file {name}: download the model "
                                      f"again to restore {name}, or remove the link to convert without one")
            if path.exists():
                kind = "a folder" if path.is_dir() else "no regular file"
                raise ConversionError(f"{path} is {kind}, not the JSON file {name}: put the model's {name} there, "
                                      "or remove it to convert without one")
            continue
        try:
            texts[name] = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConversionError(f"cannot read {path}: {error}") from error
        parse_json_object(texts[name], str(path))
    return texts


def parse_json_object(text: str, where: str) -> dict:
    """The JSON object in ``text`` (from ``where``, named in errors)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConversionError(f"{where} is not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise ConversionError(f"{where} holds a JSON {type(value).__name__}, not an object of config fields")
    return value


PICK_THE_CARD = "pick the card of this checkpoint with --model"
"""What :func:`check_hf_config` tells the user by default: the config came with the checkpoint, so the card is what
to change (an ``--hf-config`` of another model gets its own remedy instead)."""


class CardContradiction(ConversionError):
    """A ``config.json`` whose fields contradict the card (:func:`check_hf_config`): the checkpoint's tensors may
    still fit the card, when the config is the part that is wrong."""

    def __init__(self, message: str, fields: dict[str, str], remedy: str, sizes_only: bool = False) -> None:
        super().__init__(message)
        self.fields = fields
        """Field -> what the checkpoint and the card say of it, for each contradicted field named."""
        self.remedy = remedy
        """What the refusal tells the user to do, after the fields."""
        self.sizes_only = sizes_only
        """Whether every contradicted field is one of :data:`_TENSOR_SIZE_KEYS`, which the tensors' shapes also
        give."""


def check_hf_config(card: ModelCard, config_text: str, where: str,
                    fix: str = PICK_THE_CARD, embedding_rows: int | None = None) -> None:
    """Raise naming every field of ``config_text`` (a ``config.json`` from ``where``) that contradicts ``card``.

    A quantized model's config (:func:`check_not_quantized`) is refused first. A ``model_type`` other than the card's
    config's (a checkpoint of another family) is refused before anything else is read, naming only that field; a
    text model's config (written back verbatim) must state ``model_type``, and ``architectures``, where stated, must
    name the card's causal-LM class (the export would not load, or load as another model); a shape field the
    checkpoint states but the card's config class does not have (e.g. ``norm_topk_prob`` for a Qwen3.5 card) counts
    as a contradiction. A vocabulary size that is the only contradiction points to ``--vocab-size`` (no other card
    would fit), and YaRN RoPE scaling (for long contexts) is named an inference-time setting to leave out
    (:func:`_yarn_fix`), followed, where the config contradicts the card besides, by those fields and their own
    remedy (:func:`_refusal_without_scaling`). ``fix`` ends every other refusal: what to change when the config is
    another model's (by default the card, for a config that came with the checkpoint).
    ``embedding_rows`` (the rows of the weights' ``model.embed_tokens.weight``, where the config came with them): a
    ``vocab_size`` stating another count is refused first, naming both; the config then contradicts its own weights,
    and the card's refusal (pass ``--vocab-size`` = the config's) and the weights' (= the rows) would send the user
    back and forth.
    """
    stored = parse_json_object(config_text, where)
    check_not_quantized(stored, where)
    text = _text_fields(stored, where)
    expected = family_module(card).hf_config_from_card(card)

    def refuse(wrong: dict[str, str], remedy: str = fix, sizes_only: bool = False) -> CardContradiction:
        return CardContradiction(f"{where} does not describe card {card.name}: {'; '.join(wrong.values())}; {remedy}",
                                 wrong, remedy, sizes_only)

    if "model_type" in text and text["model_type"] != expected.model_type:
        types = convertible_model_types()
        if fix == PICK_THE_CARD and text["model_type"] not in types:
            other_model = (f"oellm convert converts {' and '.join(map(repr, types))} checkpoints only (for a "
                           "multimodal one, the model_type of its text_config): this is another model")
        elif fix == PICK_THE_CARD:
            other_model = fix + _which_card_fits(card, config_text, where, text, plain_if_none=False)
        else:
            other_model = fix
        raise refuse({"model_type": f"model_type: checkpoint {text['model_type']!r}, card {expected.model_type!r}"},
                     other_model)
    stated_vocab = text.get("vocab_size")
    if embedding_rows is not None and isinstance(stated_vocab, int) and stated_vocab != embedding_rows:
        raise ConversionError(f"{where} says vocab_size {stated_vocab}, but the checkpoint's model.embed_tokens.weight "
                              f"has {embedding_rows} rows: the config contradicts its own weights (a config.json of "
                              "another save, or an edited one); set vocab_size to the rows in it")
    try:
        with _transformers_quiet():
            loaded = type(expected).from_dict(text)
    except Exception as error:  # transformers' field validation raises its own types
        raise ConversionError(f"{where} cannot be read as a {type(expected).__name__}: {error}") from error
    aliases = type(expected).attribute_map
    wrong = _model_class_fields(stored, expected)  # field -> what the checkpoint and the card say
    left_out = False  # a field the config leaves out contradicts the card as transformers reads it
    for k in _SHAPE_KEYS:
        have, want = _effective(loaded, k), _effective(expected, k)
        stated = _stated(text, aliases, k)
        if not stated and want is _MISSING:
            continue
        if want is _MISSING:
            wrong[k] = f"{k}: checkpoint {have!r}, card's {type(expected).__name__} has no such field"
        elif have != want:
            note = "" if stated else f" (not stated in the config: {type(expected).__name__} reads it so)"
            wrong[k] = f"{k}: checkpoint {have!r}, card {want!r}{note}"
            left_out |= not stated
    for k in _DERIVED_KEYS:
        if not hasattr(expected, k):  # the family's model does not read it
            continue
        have, want = getattr(loaded, k, None), getattr(expected, k)
        if have != want:
            wrong[k] = f"{k}: checkpoint {have!r}, card {want!r}"
    if loaded.hidden_act != expected.hidden_act:
        wrong["hidden_act"] = f"hidden_act: checkpoint {loaded.hidden_act!r}, card {expected.hidden_act!r}"
    rope, card_rope = loaded.rope_parameters or {}, {**_ROPE_DEFAULTS, **expected.rope_parameters}
    for k, v in card_rope.items():
        have = rope.get(k, _ROPE_DEFAULTS.get(k))
        if have != v:
            wrong[f"rope_parameters.{k}"] = f"rope_parameters.{k}: checkpoint {have!r}, card {v!r}"
    if rope.get("rope_type") == "yarn" and "rope_parameters.rope_type" in wrong:
        others = _refusal_without_scaling(card, _without_rope_scaling(stored, card_rope), where, fix, embedding_rows)
        other_fields = others.fields if others else {}
        # the scaling's: RoPE fields read otherwise without it (rope_type, a rope_theta its rope_scaling object drops)
        scaling = {k: v for k, v in wrong.items() if k.startswith("rope_parameters.") and other_fields.get(k) != v}
        remedy = _yarn_fix(only_rope_type=list(scaling) == ["rope_parameters.rope_type"])
        raise refuse(scaling | other_fields, remedy + (f"; beyond the scaling, {others.remedy}" if others else ""))
    if list(wrong) == ["vocab_size"] and not left_out:  # a vocabulary of its own, not another card
        raise refuse(wrong, vocab_size_fix(loaded.vocab_size))
    if wrong and set(wrong) <= {"model_type", "architectures"}:  # this card's model, its class misnamed
        raise refuse(wrong, f"state \"model_type\": {json.dumps(expected.model_type)} and "
                            f"\"architectures\": {json.dumps(expected.architectures)} in it, as the card's config "
                            "does (transformers picks the model class by them)")
    if wrong.get("tie_word_embeddings") and loaded.tie_word_embeddings and fix == PICK_THE_CARD:
        raise refuse(wrong, "no card of megatron-oellm ties the output layer to the embedding, so no --model "
                            "converts this checkpoint")
    if wrong:
        sizes_only = set(wrong) <= set(_TENSOR_SIZE_KEYS)
        remedy = fix + (", or state the fields it leaves out in config.json" if left_out else "")
        if fix == PICK_THE_CARD:  # sizes the weights show, or fields the config leaves out, may be what is wrong
            remedy += _which_card_fits(card, config_text, where, text, plain_if_none=sizes_only or left_out)
        raise refuse(wrong, remedy, sizes_only)


def check_not_quantized(stored: dict, where: str) -> None:
    """Raise naming its method where ``stored`` (a ``config.json`` from ``where``) describes a quantized model
    (``quantization_config`` at its top level or in its ``text_config``): GPTQ and AWQ checkpoints store packed
    integer tensors (``qweight``, ``qzeros``, ``scales``) in place of the weights, FP8 ones float8 weights with a
    ``weight_scale_inv`` beside each, which the tensor checks refused as a missing tensor or an unread dtype. No
    release is named: a card does not record its Hugging Face repository, and one card's would be wrong for another."""
    for part in (stored, stored.get("text_config")):
        quantization = part.get("quantization_config") if isinstance(part, dict) else None
        if quantization is None:
            continue
        method = quantization.get("quant_method") if isinstance(quantization, dict) else None
        kind = f"a {method} quantized model" if isinstance(method, str) else "a quantized model"
        raise ConversionError(f"{where} describes {kind} (quantization_config, quant_method {method!r}): oellm "
                              "convert reads and writes unquantized weights (bf16, fp16, fp32) only; convert the "
                              "model's unquantized release (the repository without -GPTQ-Int4, -AWQ or -FP8 in its "
                              "name)")


@contextmanager
def _transformers_quiet() -> Iterator[None]:
    """transformers' logger at errors only, its level restored after: reading a config it would warn about (YaRN's
    factor against ``max_position_embeddings``) printed a ``[transformers]`` line on stderr beside the conversion's
    own refusal."""
    from transformers.utils import logging as transformers_logging

    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)


def _without_rope_scaling(stored: dict, card_rope: dict) -> dict:
    """A copy of ``stored`` (a ``config.json``; its ``text_config`` where nested) without RoPE scaling: no
    ``rope_scaling``, and ``rope_parameters`` holding only the fields the card's (``card_rope``) has, its
    ``rope_type`` the card's. Whether the card describes that copy tells whether the scaling is all that differs."""
    unscaled = copy.deepcopy(stored)
    text = unscaled.get("text_config", unscaled)
    if not isinstance(text, dict):
        return unscaled
    text.pop("rope_scaling", None)
    rope = text.get("rope_parameters")
    if isinstance(rope, dict):
        text["rope_parameters"] = {**{k: v for k, v in rope.items() if k in card_rope},
                                   "rope_type": card_rope["rope_type"]}
    return unscaled


def _refusal_without_scaling(card: ModelCard, unscaled: dict, where: str, fix: str,
                             embedding_rows: int | None) -> CardContradiction | None:
    """The refusal :func:`check_hf_config` gives ``unscaled`` (a config with YaRN scaling, from ``where``, without it:
    :func:`_without_rope_scaling`), or None where it describes ``card``: the contradictions besides the scaling, each
    with the remedy it gets alone. Where there were some, the scaling was refused as a field like any other and not
    named an inference-time setting, and the remedy was sought for the scaled config, which no card fits."""
    try:
        check_hf_config(card, json.dumps(unscaled), where, fix, embedding_rows)
    except CardContradiction as refusal:
        return refusal
    return None


def _yarn_fix(only_rope_type: bool) -> str:
    """What a refusal of a config with YaRN RoPE scaling tells the user of the scaling. YaRN (not linear
    or dynamic scaling, which fine-tuning uses too) is an inference-time setting. Where more than ``rope_type``
    contradicts the card, a ``rope_scaling`` object replaced ``rope_parameters`` (transformers 5 reads one or the
    other), dropping fields such as ``rope_theta``: adding it back so would load the export with a wrong RoPE base."""
    setting = ("RoPE scaling (rope_type 'yarn', as Qwen's model cards suggest for contexts past the trained length) is "
               "an inference-time setting, not part of the weights: convert with a copy of config.json without it "
               "(rope_scaling, or rope_parameters' rope_type and scaling fields)")
    if only_rope_type:
        return f"{setting}, and add it back to the config.json of the Hugging Face export"
    return (f"{setting}; its rope_scaling object replaces rope_parameters as transformers 5 reads the config, so the "
            "fields of rope_parameters it leaves out take transformers' defaults: in the Hugging Face export's "
            "config.json, put the scaling fields (rope_type 'yarn', factor, original_max_position_embeddings) inside "
            "rope_parameters, keeping its rope_theta, rather than in a rope_scaling object")


def _which_card_fits(card: ModelCard, config_text: str, where: str, text: dict, plain_if_none: bool) -> str:
    """What :data:`PICK_THE_CARD` gets added for a config that contradicts ``card``: the cards of the catalogue it
    describes (a published model, its ``-tiny`` or the ``-proxy-<N>L`` of the config's layer count; with the
    ``--vocab-size`` of the config where only the vocabulary differs), or, where none does, that no card can convert
    it (e.g. a later release of the same architecture with another ``rope_theta``). Nothing is added where none fits
    and ``plain_if_none``: when the contradiction may be the config's (sizes its weights show, fields it leaves out),
    the given card may still be the right one. Without this the user was sent looking for a card that does not
    exist."""
    vocab = text.get("vocab_size")
    fitting = []
    for other in _catalogue_cards(text.get("num_hidden_layers")):
        if other.name == card.name:
            continue
        if _describes(other, config_text, where):
            fitting.append(other.name)
        elif (isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 and vocab != other.vocab_size
              and _describes(other.with_vocab(vocab), config_text, where)):
            fitting.append(f"{other.name} with --vocab-size {vocab}")
    if fitting:
        return f" ({' or '.join(fitting)} fits it)"
    if plain_if_none:
        return ""
    return (": no card of megatron-oellm fits it (`oellm models` lists them), so converting it needs a card of its own "
            "(megatron/oellm/cards.py)")


def _catalogue_cards(layers: object) -> list[ModelCard]:
    """Every published card, its ``-tiny`` flavour and, for an int ``layers`` below its depth, its
    ``-proxy-<layers>L``: the cards a checkpoint's config could describe."""
    cards = []
    for base in PUBLISHED_CARDS.values():
        cards += [base, tiny(base)]
        if isinstance(layers, int) and not isinstance(layers, bool) and 0 < layers < base.num_layers:
            try:
                cards.append(get_card(f"{base.name}-proxy-{layers}L"))
            except CardError:  # a layer count that cuts the card's mixer period
                continue
    return cards


def _describes(card: ModelCard, config_text: str, where: str) -> bool:
    """Whether :func:`check_hf_config` accepts ``config_text`` for ``card`` (a family without a converter does
    not)."""
    try:
        check_hf_config(card, config_text, where, fix="")
    except ConversionError:
        return False
    return True


@lru_cache(maxsize=1)
def convertible_model_types() -> tuple[str, ...]:
    """The Hugging Face ``model_type`` of each published card's family that has a converter, sorted: what a
    checkpoint of another type is told ``oellm convert`` reads."""
    types = set()
    for card in PUBLISHED_CARDS.values():
        try:
            types.add(family_module(card).hf_config_from_card(card).model_type)
        except ConversionError:  # a family without a converter (the CKDA hybrid)
            continue
    return tuple(sorted(types))


def _model_class_fields(stored: dict, expected: PretrainedConfig) -> dict[str, str]:
    """Contradictions of the card's ``expected`` config in the fields by which transformers picks the model class, in
    a text model's config ``stored`` (written back verbatim): a ``model_type`` left out (``from_pretrained`` cannot
    read the export) and ``architectures`` naming another class than the card's causal-LM class. A multimodal
    config's are not compared: its export states the card's (:func:`text_model_config`)."""
    if "text_config" in stored:
        return {}
    wrong = {}
    if "model_type" not in stored:
        wrong["model_type"] = f"model_type: not stated (transformers needs it), card {expected.model_type!r}"
    architectures = stored.get("architectures")
    if architectures and architectures != list(expected.architectures):
        wrong["architectures"] = f"architectures: checkpoint {architectures!r}, card {list(expected.architectures)!r}"
    return wrong


def _text_fields(stored: dict, where: str) -> dict:
    """The fields describing the language model of ``stored`` (a ``config.json`` from ``where``): the config itself,
    or for a multimodal one its ``text_config`` plus the :data:`TOP_LEVEL_TEXT_FIELDS` it lacks or states as null, as
    :func:`text_model_config` writes them back (a top-level ``tie_word_embeddings`` then decides the export)."""
    text = stored.get("text_config", stored)
    if not isinstance(text, dict):
        raise ConversionError(f"{where}: 'text_config' is a JSON {type(text).__name__}, not an object")
    if text is stored:
        return text
    return _with_top_level_text_fields(stored, text)


def _stated(text: dict, aliases: dict[str, str], key: str) -> bool:
    """Whether config fields ``text`` state ``key``, under its name or the config class's alias."""
    return key in text or aliases.get(key) in text


def _effective(config: object, key: str) -> object:
    """``config.key`` as the HF model uses it: a missing ``head_dim`` is ``hidden_size // num_attention_heads``
    (Qwen3-MoE's attention), other missing fields :data:`_MISSING`. A ``head_dim`` stated as null stays None:
    Qwen3-MoE's attention takes it as the head size and cannot be built."""
    value = getattr(config, key, _MISSING)
    if key == "head_dim" and value is _MISSING:
        heads = getattr(config, "num_attention_heads", 0)
        return config.hidden_size // heads if isinstance(heads, int) and heads > 0 else _MISSING
    return value


TOP_LEVEL_TEXT_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "dtype", "torch_dtype",
                         "transformers_version")
"""Fields a multimodal config may state only at its top level that still describe its language model."""


def _with_top_level_text_fields(stored: dict, text: dict) -> dict:
    """``text`` (the ``text_config`` of the multimodal config ``stored``) with the :data:`TOP_LEVEL_TEXT_FIELDS`
    ``stored`` states at its top level where ``text`` lacks them or states them as null: transformers 5's
    ``save_pretrained`` of ``Qwen3_5MoeConfig`` writes ``"eos_token_id": null`` (and the other token ids) into
    ``text_config`` beside the real ids at the top level, which then wiped them from the export's config."""
    top = {k: stored[k] for k in TOP_LEVEL_TEXT_FIELDS if k in stored}
    return {**top, **{k: v for k, v in text.items() if v is not None or top.get(k) is None}}


def text_model_config(card: ModelCard, config_text: str) -> str | None:
    """For a multimodal ``config.json`` (``text_config`` nested), the config of its language model alone, as the
    card's causal-LM class reads it: ``text_config`` with the card's ``architectures`` and ``model_type``, plus the
    :data:`TOP_LEVEL_TEXT_FIELDS` it lacks or states as null (:func:`_with_top_level_text_fields`). None for a text
    model's config (written back unchanged).

    The export holds only the language model, under the causal-LM names (``model.layers.*``); the multimodal
    config's ``architectures`` would make loaders that follow it (``AutoModelForImageTextToText``) expect
    ``model.language_model.*`` and leave the whole language model randomly initialised.
    """
    stored = parse_json_object(config_text, CONFIG_NAME)
    if "text_config" not in stored:
        return None
    expected = family_module(card).hf_config_from_card(card)
    text = _with_top_level_text_fields(stored, stored["text_config"])
    text.update(architectures=list(expected.architectures), model_type=expected.model_type)
    return json.dumps(text, indent=2, sort_keys=True) + "\n"
