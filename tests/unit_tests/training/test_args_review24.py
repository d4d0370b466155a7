"""Architecture flags a model card leaves unset: given beside ``--oellm-model`` they were lost without a word."""

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.recipes.megatron_validation import megatron_refusal
from megatron.oellm.training.args import CardFlagConflict, merge_card_flags

GPT = "qwen3-30b-a3b-tiny"
HYBRID = "qwen3.5-35b-a3b-tiny"


@pytest.mark.parametrize("model, flags, dest", [
    (GPT, ["--moe-shared-expert-intermediate-size", "64"], "moe_shared_expert_intermediate_size"),
    (GPT, ["--moe-shared-expert-intermediate-size", "64", "--moe-shared-expert-gate"],
     "moe_shared_expert_intermediate_size"),
    (GPT, ["--hybrid-layer-pattern", "*E*E*E*E"], "hybrid_layer_pattern"),
    (GPT, ["--experimental-attention-variant", "gated_delta_net", "--linear-attention-freq", "2"],
     "experimental_attention_variant"),
    (HYBRID, ["--experimental-attention-variant", "gated_delta_net", "--linear-attention-freq", "2"],
     "experimental_attention_variant"),
])
def test_an_architecture_flag_the_card_leaves_unset_is_a_conflict(model, flags, dest):
    """megatron read these flags (a shared expert of 64, 8 hybrid layers, GDN layers), but the model provider built
    the card without them: a Qwen3 MoE with no shared expert, 2 GPT layers, no GDN; the FLOP count followed the card."""
    with pytest.raises(CardFlagConflict, match=rf"--{dest.replace('_', '-')}: the command line gives {dest}=.*"
                                               rf"model card {model} leaves it unset"):
        merge_card_flags(["--oellm-model", model, *flags])


def test_the_recipe_check_refuses_a_shared_expert_the_card_does_not_have():
    argv = ["--oellm-model", GPT, "--moe-shared-expert-intermediate-size", "64", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--seq-length", "128", "--bf16"]
    assert "CardFlagConflict" in (megatron_refusal(argv, world_size=1, env={}) or "")


def test_flags_the_card_sets_are_still_filled_in_and_unset_ones_are_not():
    merged = merge_card_flags(["--oellm-model", GPT])
    assert "--hybrid-layer-pattern" not in merged.argv and "--moe-shared-expert-intermediate-size" not in merged.argv
    assert merged.argv.count("--num-experts") == 1 and merged.card == get_card(GPT)
    hybrid = merge_card_flags(["--oellm-model", HYBRID, "--moe-shared-expert-intermediate-size", "48"])
    assert hybrid.argv.count("--moe-shared-expert-intermediate-size") == 1


def test_a_hybrid_cards_decoder_layer_count_as_num_layers_is_explained():
    """``--num-layers 40`` beside Qwen3.5 (40 decoder layers) conflicts with megatron's hybrid count of 80 (a mixer
    and an MoE block per decoder layer); the refusal says so instead of only naming 80."""
    card = get_card("qwen3.5-35b-a3b")
    with pytest.raises(CardFlagConflict, match=r"num_layers=80 \(megatron counts a hybrid model's mixers and MoE "
                                               r"blocks as layers: the card's 40 decoder layers are 80\)"):
        merge_card_flags(["--oellm-model", card.name, "--num-layers", str(card.num_layers)])
    with pytest.raises(CardFlagConflict) as plain:
        merge_card_flags(["--oellm-model", "qwen3-30b-a3b", "--num-layers", "40"])
    assert "megatron counts" not in str(plain.value)
