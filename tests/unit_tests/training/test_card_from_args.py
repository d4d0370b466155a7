"""Cards rebuilt from Megatron's flags equal the cards the flags were written from (every published card); flags no
card describes are refused, and the vocabulary is the tokenizer's when no ``--vocab-size`` is given."""

import dataclasses

import pytest
import torch

from megatron.oellm.cards import PUBLISHED_CARDS, get_card, list_card_names
from megatron.oellm.megatron_args import flags_to_argv, model_flags, parse_megatron_argv
from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.card_from_args import card_from_megatron_args, mixer_period
from megatron.oellm.training.model_provider import card_from_args

NAMES = [n for n in PUBLISHED_CARDS if get_card(n).family != "ckda_hybrid"]  # 'K' is no Megatron pattern symbol


@pytest.mark.parametrize("name", NAMES + [f"{n}-tiny" for n in NAMES] + ["qwen3.5-35b-a3b-proxy-8L"])
def test_round_trip_through_megatron_flags(name):
    card = get_card(name)
    args = parse_megatron_argv(flags_to_argv(model_flags(card)) + ["--seq-length", str(card.seq_length)])
    rebuilt = card_from_megatron_args(args, name=card.name)
    assert rebuilt == dataclasses.replace(card, hf_architecture="")


@pytest.mark.parametrize("name", [n for n in list_card_names() if get_card(n).family != "ckda_hybrid"])
def test_round_trip_through_megatron_validate_args(name):
    """Every registered card survives megatron's ``validate_args`` (which rewrites some arguments) unchanged."""
    card = get_card(name)
    argv = flags_to_argv(model_flags(card)) + ["--seq-length", str(card.seq_length), "--micro-batch-size", "1",
                                               "--global-batch-size", "8", "--bf16"]
    args = validate_args_on_cluster(parse_megatron_argv(argv), world_size=8)
    assert card_from_megatron_args(args, name=card.name) == dataclasses.replace(card, hf_architecture="")


def test_mixer_period_and_bad_patterns():
    assert mixer_period("GEGEGE*E|GEGEGE*E") == ("gdn", 4)
    with pytest.raises(ValueError, match="not periodic"):
        mixer_period("GE*EGEGE")
    with pytest.raises(ValueError, match="one mixer followed by E"):
        mixer_period("GGE*")
    with pytest.raises(ValueError, match="no card family"):
        mixer_period("ME*E")


def test_dense_model_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="--num-experts"):
        card_from_megatron_args(parse_megatron_argv(["--num-layers", "2", "--hidden-size", "64",
                                                     "--num-attention-heads", "4"]))


def _parsed(card_name: str, **overrides) -> object:
    """Megatron's parsed flags of ``card_name``'s card with ``overrides`` (flag name -> value; None drops one)."""
    flags = {**model_flags(get_card(card_name)), **overrides}
    return parse_megatron_argv(flags_to_argv(flags) + ["--seq-length", "4096"])


@pytest.mark.parametrize("freq", ["4", "([1]*3+[0]*1)*10"])
def test_gpt_path_gated_deltanet_is_the_qwen3_5_card(freq):
    """MN5 #438's HybridEP runs: megatron-core's GPT model with GDN layers, no hybrid pattern; it was rebuilt as an
    all-attention qwen3_moe card."""
    card = get_card("qwen3.5-35b-a3b")
    args = _parsed("qwen3.5-35b-a3b", **{"hybrid-layer-pattern": None, "num-layers": 40,
                                         "experimental-attention-variant": "gated_delta_net",
                                         "linear-attention-freq": freq})
    assert card_from_megatron_args(args, name=card.name) == dataclasses.replace(card, hf_architecture="")


@pytest.mark.parametrize("freq, message", [
    (1, "is not 'every Nth layer softmax attention'"),
    ([1, 1, 0, 1, 1, 1, 0, 1] * 5, "is not 'every Nth layer softmax attention'"),
    (None, "is not 'every Nth layer softmax attention'"),
])
def test_gpt_path_gated_deltanet_without_a_periodic_mix_is_refused(freq, message):
    args = _parsed("qwen3.5-35b-a3b", **{"hybrid-layer-pattern": None, "num-layers": 40,
                                         "experimental-attention-variant": "gated_delta_net"})
    args.linear_attention_freq = freq
    with pytest.raises(ValueError, match=message):
        card_from_megatron_args(args)


@pytest.mark.parametrize("flags, named", [
    ({"moe-layer-freq": "([0]+[1]*47)"}, "--moe-layer-freq"),
    ({"multi-latent-attention": True}, "--multi-latent-attention"),
    ({"mtp-num-layers": 1}, "--mtp-num-layers"),
    ({"experimental-attention-variant": "dsa"}, "--experimental-attention-variant"),
    ({"swiglu": False}, "--swiglu"),
    ({"disable-bias-linear": False}, "no --disable-bias-linear"),
    ({"normalization": "LayerNorm"}, "--normalization"),
    ({"window-size": "(128,0)"}, "--window-size"),
    ({"add-qkv-bias": True}, "--add-qkv-bias"),
    ({"use-rope-scaling": True}, "--use-rope-scaling"),
    ({"rotary-seq-len-interpolation-factor": 4}, "--rotary-seq-len-interpolation-factor"),
])
def test_architecture_flags_no_card_describes_are_refused(flags, named):
    """They were ignored: a dense first layer was counted and built as an MoE layer."""
    with pytest.raises(ValueError, match=f"no model card describes these Megatron flags: {named} "):
        card_from_megatron_args(_parsed("qwen3-30b-a3b", **flags))


def test_a_hybrid_pattern_with_mtp_layers_is_refused():
    pattern = get_card("qwen3.5-35b-a3b").hybrid_layer_pattern
    args = _parsed("qwen3.5-35b-a3b", **{"hybrid-layer-pattern": pattern + "/*E"})
    with pytest.raises(ValueError, match="multi-token prediction layers after '/'"):
        card_from_megatron_args(args)


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
    (["--moe-router-num-groups", "4", "--moe-router-group-topk", "2"], "--moe-router-num-groups 4 "
                                                                       r"\(group-limited routing\); "
                                                                       "--moe-router-group-topk"),
    (["--moe-router-num-groups", "4"], "--moe-router-num-groups"),
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


@pytest.mark.parametrize(("groups", "group_topk"), [(4, 3), (8, 1)])
def test_premise_group_limited_routing_starves_experts_or_fails_where_the_card_routes_freely(groups, group_topk):
    """megatron-core's routing with expert groups (8 experts, top 2): more groups kept than the top-k scores every
    group 0, so every token picks the same groups and the other groups' experts get no token; one group kept of 8
    asks each group for more top scores than it has experts and fails. The card's free top-k reaches every expert."""
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    logits = torch.randn(2048, 8)
    _, free = topk_routing_with_score_function(logits, 2)
    assert bool((free.sum(0) > 0).all())
    if group_topk > 2:
        _, grouped = topk_routing_with_score_function(logits, 2, num_groups=groups, group_topk=group_topk)
        assert int((grouped.sum(0) == 0).sum()) == 8 // groups  # one group's experts never routed to
    else:
        with pytest.raises(RuntimeError, match="out of range"):
            topk_routing_with_score_function(logits, 2, num_groups=groups, group_topk=group_topk)


@pytest.mark.parametrize("balancing", ["sinkhorn", "quantile_balancing"])
def test_a_load_balancing_type_no_card_models_is_refused_from_flags(balancing):
    """Megatron's flags may name routings the card type does not list (its ``Literal``): the card rebuilt from them
    carried the value anyway, and with an aux-loss coefficient megatron-core's sinkhorn routing asserts at the first
    training step. The card refuses it, naming the values it models; the listed ones pass."""
    import inspect

    from megatron.core.transformer.moe.router import TopKRouter

    from megatron.oellm.cards import CardError

    assert "Sinkhorn routing does not support aux loss." in inspect.getsource(TopKRouter)
    card = get_card("qwen3-30b-a3b-tiny")
    flags = {**model_flags(card), "moe-router-load-balancing-type": balancing}
    args = parse_megatron_argv(flags_to_argv(flags) + ["--seq-length", str(card.seq_length)])
    with pytest.raises(CardError, match=f"moe_router_load_balancing_type must be one of aux_loss, seq_aux_loss, "
                                        f"global_aux_loss, none .*got '{balancing}'"):
        card_from_megatron_args(args)
    for listed in ("aux_loss", "seq_aux_loss", "global_aux_loss", "none"):
        flags = {**model_flags(card), "moe-router-load-balancing-type": listed}
        args = parse_megatron_argv(flags_to_argv(flags) + ["--seq-length", str(card.seq_length)])
        assert card_from_megatron_args(args).moe_router_load_balancing_type == listed
