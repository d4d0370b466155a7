"""A card read back from Megatron's flags when the vocabulary is the tokenizer's (no ``--vocab-size``)."""

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import flags_to_argv, model_flags
from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.card_from_args import card_from_megatron_args
from megatron.oellm.training.model_provider import card_from_args


def _validated_without_vocab_size(name: str):
    flags = {**model_flags(get_card(name)), "vocab-size": None}
    argv = flags_to_argv(flags) + ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "Qwen/Qwen3-30B-A3B",
                                   "--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length", "128",
                                   "--bf16"]
    return validate_args_on_cluster(parse_oellm_argv(argv), world_size=1)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_the_tokenizers_vocabulary_is_read_from_megatrons_padded_size(name):
    """Megatron's ordinary way (pretrain_gpt.py with a tokenizer, no --vocab-size) was a TypeError traceback on every
    rank: the card was built with vocab_size=None."""
    args = _validated_without_vocab_size(name)
    assert args.vocab_size is None
    args.padded_vocab_size = 151936  # megatron's tokenizer build sets it (set_global_variables) before our checks
    card = card_from_args(args)
    assert card.vocab_size == 151936 and card.num_experts == get_card(name).num_experts


def test_without_any_vocabulary_the_error_names_the_fix():
    args = _validated_without_vocab_size("qwen3-30b-a3b-tiny")
    with pytest.raises(ValueError, match="--vocab-size"):
        card_from_megatron_args(args)


@pytest.mark.parametrize("flags, named", [
    (["--moe-latent-size", "32"], "--moe-latent-size"),
    (["--moe-router-score-function", "sigmoid"], "--moe-router-score-function"),
    (["--moe-router-topk-scaling-factor", "2.5"], "--moe-router-topk-scaling-factor"),
    (["--rotary-interleaved"], "--rotary-interleaved"),
    (["--qk-l2-norm"], "--qk-l2-norm"),
    (["--apply-residual-connection-post-layernorm"], "--apply-residual-connection-post-layernorm"),
    (["--softmax-type", "learnable"], "--softmax-type"),
])
@pytest.mark.parametrize("named_card", [True, False])
def test_flags_that_change_the_models_math_or_shapes_are_refused(flags, named, named_card):
    """megatron's config took them (the card owns no such field), so the model trained was not the card's: latent
    experts of other shapes than the FLOP count's, a sigmoid router or interleaved RoPE where the converted Hugging
    Face model has a softmax router and rotate-half RoPE."""
    card = get_card("qwen3-30b-a3b-tiny")
    argv = flags_to_argv(model_flags(card)) + ["--seq-length", "128", *flags]
    args = parse_oellm_argv(argv + (["--oellm-model", card.name] if named_card else []))
    args.padded_vocab_size = card.vocab_size
    with pytest.raises(ValueError, match=f"no model card describes these Megatron flags: {named} "):
        card_from_args(args)
