"""``oellm flops --megatron-compatible --megatron-flag NAME=VALUE``: a size no training run could have used (a width,
head or layer count below 1, top-k above the expert count, query groups that do not divide the heads) is refused in
one ``error:`` line naming the flag and what it can take, where Megatron's FLOP function multiplied it into a count
(``hidden-size=-1``: -79.1 %, ``moe-router-topk=200`` of 128 experts: +1130 %) printed with exit status 0. Values
megatron-core takes still count."""

import json
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.flops import SIZE_FLAGS, FlopError, megatron_namespace

GPT = "qwen3-30b-a3b"
"""A GPT card: 32 attention heads in 4 query groups, 128 experts of which a token is routed to 8."""
GDN = "qwen3.5-35b-a3b"
"""A hybrid card with Gated DeltaNet layers (16 key heads, 32 value heads)."""


def _flops(model: str, *flags: str) -> list[str]:
    return ["flops", model, "--seq-length", "4096", "--megatron-compatible",
            *(item for flag in flags for item in ("--megatron-flag", flag))]


def _refusal(capsys: pytest.CaptureFixture, model: str, *flags: str) -> str:
    """The one ``error:`` line of a refused command (exit status 2, nothing on stdout)."""
    assert cli.main(_flops(model, *flags)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith("oellm flops: error: --megatron-flag ")
    return captured.err


def _total(capsys: pytest.CaptureFixture, model: str, *flags: str) -> float:
    """Megatron's GFLOP per token of a command that counts (exit status 0)."""
    assert cli.main([*_flops(model, *flags), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["gflops_per_token"]


@pytest.mark.parametrize("name", ["hidden-size", "kv-channels", "num-attention-heads", "moe-ffn-hidden-size",
                                  "num-query-groups", "ffn-hidden-size", "moe-shared-expert-intermediate-size"])
def test_the_reviewers_sizes_below_one_are_refused_naming_the_flag(name, capsys):
    value = random.randint(-4096, 0)
    error = _refusal(capsys, GPT, f"{name}={value}")
    assert error.startswith(f"oellm flops: error: --megatron-flag {name}={value}: ")
    assert error.endswith(f"; give {name} >= 1\n")


@pytest.mark.parametrize("name", sorted(SIZE_FLAGS))
def test_every_size_flag_below_its_smallest_value_is_refused(name, capsys):
    minimum, reason = SIZE_FLAGS[name]
    value = minimum - random.randint(1, 4096)
    assert _refusal(capsys, GPT, f"{name.replace('-', random.choice('-_'))}={value}") == (
        f"oellm flops: error: --megatron-flag {name}={value}: {reason}; give {name} >= {minimum}\n")


def test_zero_experts_count_as_megatron_reads_them(capsys):
    """megatron-core's ``validate_args`` reads ``--num-experts 0`` as no experts (every MLP dense): 0 is counted as
    ``none`` is, not refused, and not as the card's MoE blocks, which Megatron's FLOP function counted it as."""
    dense = _total(capsys, GPT, "num-experts=none")
    assert 0 < _total(capsys, GPT, "num-experts=0") == dense < _total(capsys, GPT)


def test_a_top_k_above_the_expert_count_is_refused(capsys):
    topk = random.randint(129, 4096)
    assert _refusal(capsys, GPT, f"moe-router-topk={topk}") == (
        f"oellm flops: error: --megatron-flag moe-router-topk={topk}: moe-router-topk {topk} routes a token to more "
        f"experts than num-experts 128; give moe-router-topk from 1 to 128, or num-experts {topk} or more\n")


def test_fewer_experts_than_the_cards_top_k_is_refused_naming_the_expert_flag(capsys):
    experts = random.randint(1, 7)
    error = _refusal(capsys, GPT, f"num-experts={experts}")
    assert error.startswith(f"oellm flops: error: --megatron-flag num-experts={experts}: moe-router-topk 8 routes ")
    assert error.endswith(f"give moe-router-topk from 1 to {experts}, or num-experts 8 or more\n")


def test_no_experts_for_a_hybrid_patterns_moe_layers_is_refused(capsys):
    """Megatron's hybrid count reads the pattern's ``E`` symbols, not ``num-experts``: no experts printed the card's
    count unchanged, for a model megatron-core cannot build (each ``E`` is an MoE layer of ``num-experts`` experts)."""
    experts = random.choice(["0", "none"])
    assert _refusal(capsys, GDN, f"num-experts={experts}") == (
        f"oellm flops: error: --megatron-flag num-experts={experts}: the hybrid layer pattern's E layers are MoE "
        "layers, which megatron-core builds with num-experts experts; give num-experts >= 1, or a "
        "hybrid-layer-pattern without E\n")


def test_sizes_a_model_does_not_read_are_not_refused(capsys):
    """A dense model never reads its top-k (megatron-core's ``TransformerConfig`` takes a 0), and without
    group-query-attention megatron-core passes no query groups on: 0 there counts as the model without them."""
    dense = _total(capsys, GPT, "num-experts=0")
    assert _total(capsys, GPT, "num-experts=0", "moe-router-topk=0") == dense
    mha = _total(capsys, GPT, "group-query-attention=none")
    assert _total(capsys, GPT, "group-query-attention=none", "num-query-groups=0") == mha
    value = random.randint(-4096, 0)  # where the model reads them, they are refused
    assert _refusal(capsys, GPT, f"moe-router-topk={value}").endswith("; give moe-router-topk >= 1\n")


def test_a_top_k_up_to_the_expert_count_counts_more_the_more_experts_a_token_reaches(capsys):
    small, large = sorted(random.sample(range(1, 128), 2))
    assert 0 < _total(capsys, GPT, f"moe-router-topk={small}") < _total(capsys, GPT, f"moe-router-topk={large}")
    assert _total(capsys, GPT, f"moe-router-topk={large}") < _total(capsys, GPT, "moe-router-topk=128")  # every expert


def test_query_groups_that_do_not_divide_the_heads_are_refused_with_the_divisors(capsys):
    groups = random.choice([n for n in range(1, 65) if 32 % n])
    assert _refusal(capsys, GPT, f"num-query-groups={groups}") == (
        f"oellm flops: error: --megatron-flag num-query-groups={groups}: num-query-groups {groups} does not divide "
        "num-attention-heads 32 (megatron-core splits the query heads into equal groups, one key/value head each); "
        "give num-query-groups one of 1, 2, 4, 8, 16, 32\n")


def test_heads_that_the_cards_groups_do_not_divide_are_refused_naming_the_heads_flag(capsys):
    heads = random.choice([n for n in range(1, 129) if n % 4])
    error = _refusal(capsys, GPT, f"num-attention-heads={heads}")
    assert error.startswith(f"oellm flops: error: --megatron-flag num-attention-heads={heads}: num-query-groups 4 "
                            f"does not divide num-attention-heads {heads} ")


def test_query_groups_dividing_the_heads_or_without_group_query_attention_count(capsys):
    groups = random.choice([1, 2, 4, 8, 16, 32])
    assert _total(capsys, GPT, f"num-query-groups={groups}") > 0
    ignored = random.choice([n for n in range(1, 65) if 32 % n])  # megatron-core reads no groups without GQA
    assert _total(capsys, GPT, f"num-query-groups={ignored}", "group-query-attention=false") == _total(
        capsys, GPT, "group-query-attention=false")


def test_gdn_key_heads_that_do_not_divide_the_value_heads_are_refused(capsys):
    value_heads = get_card(GDN).linear_num_value_heads
    key_heads = random.choice([n for n in range(1, 2 * value_heads + 1) if value_heads % n])
    error = _refusal(capsys, GDN, f"linear-num-key-heads={key_heads}")
    assert error.startswith(f"oellm flops: error: --megatron-flag linear-num-key-heads={key_heads}: "
                            f"linear-num-key-heads {key_heads} does not divide linear-num-value-heads {value_heads} ")


def test_the_library_refuses_as_the_command_does():
    name = random.choice(["hidden_size", "kv_channels", "num_attention_heads", "moe_ffn_hidden_size"])
    with pytest.raises(FlopError, match=f"--megatron-flag {name.replace('_', '-')}="):
        megatron_namespace(get_card(GPT), 4096, 151936, **{name: -random.randint(0, 4096)})
