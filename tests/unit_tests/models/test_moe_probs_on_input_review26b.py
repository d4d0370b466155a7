"""``--moe-apply-probs-on-input`` with top-k > 1, found in review (session 26): each refusal test failed before its fix;
the top-k 1 case keeps the check from refusing what the experts do support (CPU only).

megatron-core's grouped experts apply routing probabilities on the input for one expert per token only:
TEGroupedMLP asserts it at the first forward step, the torch-native TorchGroupedMLP when the model is built, both
after Megatron has initialised. The card -> config mapping used to accept it.
"""

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.models import spec_builder


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_probs_on_input_of_several_experts_per_token_is_refused(name: str) -> None:
    """Every card routes to more than one expert, so the setting is refused naming the top-k and the flag."""
    card = get_card(name)
    assert card.moe_router_topk > 1
    with pytest.raises(ValueError, match=rf"moe_router_topk={card.moe_router_topk}; drop --moe-apply-probs-on-input"):
        spec_builder(card.family).transformer_config(card, moe_apply_probs_on_input=True)


def test_probs_on_input_of_one_expert_per_token_passes() -> None:
    """Top-1 routing (with the pre-softmax megatron-core requires of it) is what the experts implement: accepted."""
    card = get_card("qwen3-30b-a3b-tiny")
    config = spec_builder(card.family).transformer_config(card, moe_apply_probs_on_input=True, moe_router_topk=1,
                                                          moe_router_pre_softmax=True)
    assert config.moe_apply_probs_on_input


def test_entry_refuses_probs_on_input_before_megatron_initialises() -> None:
    """The entry's config check (built before Megatron initialises) carries the refusal, on either backend."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster
    from megatron.oellm.training.model_provider import card_from_args, check_model_config

    args = validate_on_cluster(
        ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--micro-batch-size", "1",
         "--global-batch-size", "8", "--seq-length", "128", "--bf16", "--moe-apply-probs-on-input"],
        1, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    )
    args.padded_vocab_size = args.vocab_size
    with pytest.raises(ValueError, match=r"refuses the run's arguments: moe_apply_probs_on_input"):
        check_model_config(args, card_from_args(args))
