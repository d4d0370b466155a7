"""Card -> TransformerConfig overrides that megatron-core would ignore, or refuse only after Megatron has initialised,
are refused when the config is built and by the entry's config check before Megatron initialises (CPU only; each
refusal test fails where the mapping accepts the setting, each acceptance test where it refuses a supported one).

- ``recompute_modules`` naming a module the card does not have (dense ``mlp``, an absent shared expert): megatron-core
  would silently recompute nothing.
- ``--moe-apply-probs-on-input`` with top-k > 1: megatron-core's grouped experts apply routing probabilities on the
  input for one expert per token only; TEGroupedMLP asserts it at the first forward step, the torch-native
  TorchGroupedMLP when the model is built, both after Megatron has initialised.
- ``--moe-shared-expert-overlap`` on a card without a shared expert: megatron-core ignores it.
- ``--moe-pad-expert-input-to-capacity`` with a capacity above the tokens (top-k x capacity factor > experts) in the
  all-to-all dispatcher: megatron-core's permutation fails at the first step (shown on its own functions).
- Settings the spec builders do not build (multi-token prediction, L2-normalised queries and keys, dense layers
  between the MoE layers): megatron-core's config takes them, the model would run without them (or fail at its first
  step), so a benchmark's ``--ours-config`` or a direct caller of the spec builders would report another model.
"""

import math
import random

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.models import spec_builder

SELECTIVE = dict(recompute_granularity="selective")


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_recompute_of_a_dense_mlp_is_refused_for_all_moe_models(name: str) -> None:
    """``mlp`` recomputes dense MLPs only; every layer of a card is MoE, so megatron-core would silently recompute
    nothing. Refused, naming ``moe`` / ``moe_act``."""
    card = get_card(name)
    with pytest.raises(ValueError, match=r"recompute_modules 'mlp'.*'moe'"):
        spec_builder(card.family).transformer_config(card, recompute_modules=["mlp"], **SELECTIVE)


def test_recompute_of_an_absent_shared_expert_is_refused() -> None:
    """``shared_experts`` on a card without a shared expert would recompute nothing."""
    card = get_card("qwen3-30b-a3b-tiny")
    assert not card.moe_shared_expert_intermediate_size
    with pytest.raises(ValueError, match=r"recompute_modules 'shared_experts'"):
        spec_builder(card.family).transformer_config(card, recompute_modules=["shared_experts"], **SELECTIVE)
    shared = get_card("qwen3.5-35b-a3b-tiny")
    spec_builder(shared.family).transformer_config(shared, recompute_modules=["shared_experts"], **SELECTIVE)


def test_recompute_modules_are_only_judged_under_selective_recompute() -> None:
    """Full recompute ignores ``recompute_modules``, so nothing there is refused."""
    card = get_card("qwen3-30b-a3b-tiny")
    spec_builder(card.family).transformer_config(card, recompute_granularity="full", recompute_method="uniform",
                                                 recompute_num_layers=1, recompute_modules=["mlp"])


def test_entry_refuses_recompute_of_absent_modules_before_megatron_initialises() -> None:
    """The entry's config check (built before Megatron initialises) carries the refusal."""
    from megatron.oellm.recipes.megatron_validation import validate_on_cluster
    from megatron.oellm.training.model_provider import card_from_args, check_model_config

    def args_of(model: str, modules: list[str]):
        args = validate_on_cluster(
            ["--oellm-model", model, "--oellm-backend", "torch", "--micro-batch-size", "1", "--global-batch-size", "8",
             "--seq-length", "128", "--bf16", "--recompute-granularity", "selective", "--recompute-modules", *modules],
            1, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        )
        args.padded_vocab_size = args.vocab_size
        return args

    refused = args_of("qwen3-30b-a3b-tiny", ["moe_act", "mlp"])
    with pytest.raises(ValueError, match=r"refuses the run's arguments: recompute_modules 'mlp'"):
        check_model_config(refused, card_from_args(refused))
    accepted = args_of("qwen3-30b-a3b-tiny", ["moe_act", "layernorm", "core_attn"])
    check_model_config(accepted, card_from_args(accepted))


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


def test_the_shared_expert_overlap_of_a_card_without_a_shared_expert_is_refused() -> None:
    """megatron-core's config accepts it (its checks apply to a shared expert only); Qwen3.5's shared expert takes
    it."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=8, moe_ffn_hidden_size=32,
                      moe_shared_expert_overlap=True, moe_token_dispatcher_type="alltoall")
    card = get_card("qwen3-30b-a3b-tiny")
    assert not card.moe_shared_expert_intermediate_size
    with pytest.raises(ValueError, match="no shared expert, so megatron-core ignores it; drop --moe-shared-expert"):
        spec_builder(card.family).transformer_config(card, moe_shared_expert_overlap=True)
    hybrid = get_card("qwen3.5-35b-a3b-tiny")
    assert spec_builder(hybrid.family).transformer_config(hybrid, moe_shared_expert_overlap=True)


def test_premise_a_padded_capacity_above_the_tokens_fails_megatrons_permutation() -> None:
    """Router and dispatcher of megatron-core on the same routing: with top-k x factor > experts the router keeps
    every token (capacity above the tokens), the all-to-all dispatcher pads to that capacity, and the permutation
    cannot take that many rows per expert. At exactly experts / top-k it works."""
    from megatron.core.transformer.moe.moe_utils import apply_router_token_dropping, get_capacity, permute

    experts, topk, tokens = 8, 2, random.randrange(8, 64)
    logits = torch.randn(tokens, experts)
    chosen = logits.topk(topk, dim=1).indices
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter(1, chosen, True)
    probs = torch.softmax(logits, dim=1) * routing_map
    hidden = torch.randn(tokens, 16)
    for factor, fails in ((experts / topk, False), (experts / topk + random.uniform(0.2, 2.0), True)):
        kept_probs, kept_map = apply_router_token_dropping(probs, routing_map, topk, factor, pad_to_capacity=True)
        capacity = get_capacity(tokens * topk, experts, factor)
        assert (capacity > tokens) == fails
        if fails:
            assert bool(kept_map.all())  # no token dropped: every (token, expert) pair kept
            with pytest.raises(RuntimeError):
                permute(hidden, kept_map, kept_probs, num_out_tokens=capacity * experts, drop_and_pad=True)
        else:
            permuted = permute(hidden, kept_map, kept_probs, num_out_tokens=capacity * experts, drop_and_pad=True)
            assert permuted[0].shape[0] == capacity * experts


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_a_padded_capacity_above_the_tokens_is_refused_naming_the_largest_factor(name: str) -> None:
    card = get_card(name)
    builder = spec_builder(card.family)
    limit = card.num_experts / card.moe_router_topk
    padded = dict(moe_pad_expert_input_to_capacity=True, moe_token_drop_policy="probs")
    with pytest.raises(ValueError, match=rf"capacity-factor at most {limit:g}"):
        builder.transformer_config(card, moe_expert_capacity_factor=limit + random.uniform(0.1, 3.0), **padded)
    assert builder.transformer_config(card, moe_expert_capacity_factor=limit, **padded)
    # the all-gather dispatcher runs it (every token then reaches every expert); unpadded capacities never pad
    assert builder.transformer_config(card, moe_expert_capacity_factor=math.ceil(limit) + 1,
                                      moe_token_dispatcher_type="allgather", **padded)
    assert builder.transformer_config(card, moe_expert_capacity_factor=math.ceil(limit) + 1)


def test_the_recipe_check_refuses_the_padded_capacity_for_the_all_to_all_dispatcher_only() -> None:
    """From megatron's flags, as ``oellm recipe`` and the entry check them: megatron's default dispatcher (all-gather)
    runs the setting, the all-to-all one is refused."""
    from megatron.oellm.recipes.megatron_validation import megatron_refusal

    card = get_card("qwen3-30b-a3b-tiny")
    argv = ["--oellm-model", card.name, "--oellm-backend", "torch", "--micro-batch-size", "1", "--global-batch-size",
            "8", "--seq-length", "128", "--bf16", "--lr", "1e-4", "--train-iters", "10", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--moe-pad-expert-input-to-capacity", "--moe-expert-capacity-factor",
            str(card.num_experts // card.moe_router_topk + 1)]
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert megatron_refusal([*argv, "--moe-token-dispatcher-type", "allgather"], 8, env) is None
    refusal = megatron_refusal([*argv, "--moe-token-dispatcher-type", "alltoall"], 8, env)
    assert refusal is not None and "moe_pad_expert_input_to_capacity" in refusal


UNBUILT = [
    (dict(mtp_num_layers=1), r"mtp_num_layers=1: the spec builders build no multi-token prediction block"),
    (dict(qk_l2_norm=True), r"qk_l2_norm: the spec builders put the card's RMSNorm in the query and key norm slots"),
    (dict(moe_layer_freq=[0, 1]), r"moe_layer_freq=\[0, 1\]: the spec builders put an MoE block in every layer"),
    (dict(moe_layer_freq=2), r"moe_layer_freq=2: the spec builders put an MoE block in every layer"),
]


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
@pytest.mark.parametrize(("setting", "refusal"), UNBUILT)
def test_settings_the_spec_builders_do_not_build_are_refused(name: str, setting: dict, refusal: str) -> None:
    """megatron-core's TransformerConfig takes each setting (premise), the spec builders refuse it by name."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    card = get_card(name)
    TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=8, moe_ffn_hidden_size=32,
                      moe_token_dispatcher_type="alltoall", **setting)
    with pytest.raises(ValueError, match=refusal):
        spec_builder(card.family).transformer_config(card, **setting)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_an_moe_block_in_every_layer_spelled_out_passes(name: str) -> None:
    """A list of ones is what the specs build, as are megatron-core's defaults of the three settings."""
    card = get_card(name)
    ones = [1] * card.num_layers
    assert spec_builder(card.family).transformer_config(card, moe_layer_freq=ones).moe_layer_freq == ones
    config = spec_builder(card.family).transformer_config(card)
    assert (config.mtp_num_layers, config.qk_l2_norm, config.moe_layer_freq) == (None, False, 1)


def test_the_bench_refuses_an_unbuilt_setting_of_its_own_sides_on_the_cpu() -> None:
    """``oellm bench --ours-config`` reaches the spec builders' check when its settings are made, before any model
    is built."""
    from megatron.oellm.bench.harness import BenchConfig

    setting, refusal = random.choice(UNBUILT)
    with pytest.raises(ValueError, match=r"\(--ours-config\) are refused: " + refusal):
        BenchConfig(model="qwen3.5-35b-a3b-tiny", seq_length=128, sides=("ours",), ours_overrides=setting)
