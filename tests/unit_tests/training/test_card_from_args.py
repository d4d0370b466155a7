"""Cards rebuilt from Megatron's flags equal the cards the flags were written from (every published card)."""

import dataclasses

import pytest

from megatron.oellm.cards import PUBLISHED_CARDS, get_card, list_card_names
from megatron.oellm.megatron_args import flags_to_argv, model_flags, parse_megatron_argv
from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.card_from_args import card_from_megatron_args, mixer_period

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
