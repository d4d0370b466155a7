"""``oellm plan``'s text, model cards' checks and card -> Megatron flags on cases a mutation audit of ``plan.py``,
``params.py``, ``cards.py`` and ``megatron_args.py`` found untested: the plan's model, parameter, layout and pipeline
lines and per-rank layer / embedding / output-layer columns; card sizes and cross-field checks refused by name; the
listed card names; every flag of a random card read back by Megatron's parser. Fresh random shapes and layouts."""

from __future__ import annotations

import dataclasses
import random

import pytest

from megatron.oellm.cards import PUBLISHED_CARDS, CardError, get_card
from megatron.oellm.models.parallel import ParallelLayout
from megatron.oellm.params import format_count, parameter_counts
from megatron.oellm.plan import build_plan, format_plan

NAMES = sorted(PUBLISHED_CARDS)


def _random_stage_counts(layers: int, stages: int) -> list[int]:
    """``layers`` decoder layers cut at random into ``stages`` non-empty stages."""
    cuts = sorted(random.sample(range(1, layers), stages - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, layers], strict=True)]


def _columns(header: str, row: str) -> dict[str, str]:
    """The right-aligned columns of one plan table row, cut at where each header name ends."""
    names = ["PP rank", "layers", "emb", "head", "dense/GPU", "experts/GPU", "static GiB"]
    ends = [header.index(name) + len(name) for name in names]
    return {name: row[start:end].strip() for name, start, end in zip(names, [0, *ends[:-1]], ends, strict=True)}


def test_plan_text_names_the_models_shape_counts_layout_and_each_ranks_stages():
    """The plan text a user reads before a run: the model line's experts x width top-k, the parameter line's total and
    active counts, the layout line's data-parallel and expert data-parallel sizes, the pipeline layout given, and per
    PP rank the decoder layers it holds over its virtual stages and whether it holds the embedding / output layer.
    A random interleaved layout (stage ``i`` on rank ``i % pp``) of a 48-layer card with random experts and top-k."""
    pp, vpp, ep, replicas = random.choice([2, 3, 4]), random.choice([2, 3]), random.choice([2, 4]), random.randint(1, 3)
    experts = ep * random.randint(4, 40)
    topk = random.randint(1, experts - 1)
    card = dataclasses.replace(get_card("qwen3-30b-a3b"), num_experts=experts, moe_router_topk=topk)
    counts = _random_stage_counts(card.num_layers, pp * vpp)
    pipeline = "|".join(("E" if i == 0 else "") + f"t*{n}" + ("L" if i == len(counts) - 1 else "")
                        for i, n in enumerate(counts))
    world = pp * ep * replicas
    plan = build_plan(card, ParallelLayout(pp=pp, ep=ep, pipeline_layout=pipeline), world)
    lines = format_plan(plan, card.seq_length).splitlines()
    total = parameter_counts(card)
    assert f"{experts}x{card.moe_ffn_hidden_size} top-{topk}, padded vocab {card.vocab_size})" in lines[0]
    assert lines[1] == f"parameters   total {format_count(total.total)}, active {format_count(total.active)}"
    assert lines[2].endswith(f"on {world} GPUs: DP {world // pp}, expert DP {replicas}")
    assert f"pipeline     {pipeline}" in lines
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("PP rank"))
    rows = [_columns(lines[header], line) for line in lines[header + 1:header + 1 + pp]]
    last = (len(counts) - 1) % pp
    assert [(row["PP rank"], row["layers"], row["emb"], row["head"]) for row in rows] == [
        (str(rank), str(sum(counts[rank::pp])), "y" if rank == 0 else "", "y" if rank == last else "")
        for rank in range(pp)]


POSITIVE_FIELDS = ["num_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_query_groups", "kv_channels",
                   "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "seq_length", "max_position_embeddings"]


@pytest.mark.parametrize("field", POSITIVE_FIELDS)
def test_a_card_with_a_zero_or_negative_size_is_refused_naming_it(field):
    """Every size a card multiplies into parameter, FLOP and memory counts must be positive: a zero expert width or
    sequence passed as a valid card and printed zero-sized plans; the error names the field and the value."""
    value = random.choice([0, -random.randint(1, 4096)])
    with pytest.raises(CardError, match=rf"{field} must be positive, got {value}$"):
        dataclasses.replace(get_card(random.choice(NAMES)), **{field: value})


@pytest.mark.parametrize("field", ["linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                   "linear_value_head_dim", "linear_conv_kernel_dim"])
def test_a_linear_mixer_without_one_of_its_sizes_is_refused(field):
    """A GDN / CKDA card needs every linear-mixer size (0 means absent, which only a card without a linear mixer
    may be): a zero conv kernel counted no conv weights and built a layer megatron-core cannot."""
    name = random.choice(["qwen3.5-35b-a3b", "oellm-ckda-hybrid", "qwen3.5-35b-a3b-tiny"])
    card = get_card(name)
    with pytest.raises(CardError, match=rf"{field} must be positive for linear_mixer='{card.linear_mixer}'"):
        dataclasses.replace(card, **{field: 0})


def test_a_ckda_card_needs_its_low_rank_gate_dimension():
    """CKDA's decay and output gates are low rank: rank 0 would count neither gate; refused by name."""
    with pytest.raises(CardError, match="ckda needs linear_gate_low_rank_dim > 0"):
        dataclasses.replace(get_card(random.choice(["oellm-ckda-hybrid", "oellm-ckda-hybrid-tiny"])),
                            linear_gate_low_rank_dim=0)


def test_the_attention_interval_must_fit_the_mixer():
    """Without a linear mixer every layer is attention (interval 1, nothing else); with one, an interval of 1 would
    leave no linear layer at all, a hybrid card describing a plain attention model."""
    with pytest.raises(CardError, match="full_attention_interval must be 1 without a linear mixer"):
        dataclasses.replace(get_card(random.choice(["qwen3-30b-a3b", "qwen3-235b-a22b"])),
                            full_attention_interval=random.randint(2, 8))
    with pytest.raises(CardError, match="full_attention_interval must be >= 2 with a linear mixer"):
        dataclasses.replace(get_card(random.choice(["qwen3.5-35b-a3b", "oellm-ckda-hybrid"])),
                            full_attention_interval=1)


def test_a_shared_expert_gate_without_a_shared_expert_is_refused():
    """The gate scales the shared expert's output: without one it would add a gate's parameters to a model that has
    nothing to gate."""
    with pytest.raises(CardError, match=r"moe_shared_expert_gate needs a shared expert"):
        dataclasses.replace(get_card("qwen3-30b-a3b"), moe_shared_expert_gate=True)


def test_routing_to_every_expert_is_a_valid_card():
    """Top-k may equal the expert count (every token to every expert): such a card is valid and all its routed
    experts are active; one more than the experts is refused."""
    card = get_card(random.choice(["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"]))
    experts = random.randint(2, 16)
    dense = dataclasses.replace(card, num_experts=experts, moe_router_topk=experts)
    counts = parameter_counts(dense)
    assert counts.active == counts.total
    with pytest.raises(CardError, match=rf"moe_router_topk \({experts + 1}\) exceeds num_experts \({experts}\)"):
        dataclasses.replace(card, num_experts=experts, moe_router_topk=experts + 1)


SWITCHES = ["zero_centered_norm", "untie_embeddings", "qk_layernorm", "attention_output_gate",
            "moe_router_pre_softmax"]
"""The card's on/off fields a Megatron flag carries (the shared-expert gate follows the card's shared expert)."""


def _random_card(name: str, switches: dict[str, bool]):
    """``name``'s card with fresh random values in every field its Megatron flags carry (key and value head widths
    apart, KV channels not hidden / heads, a conv kernel not Megatron's default 4) and the on/off fields
    ``switches``, so that a flag written from the wrong field, or not at all, reads back as another card."""
    card = get_card(name)
    groups = random.choice([1, 2, 4])
    experts = random.randint(4, 32)
    fields = dict(hidden_size=random.choice([64, 96, 128]), num_attention_heads=groups * random.randint(2, 4),
                  num_query_groups=groups, kv_channels=random.choice([16, 24, 40]), num_experts=experts,
                  moe_ffn_hidden_size=random.choice([24, 40, 56]), moe_router_topk=random.randint(1, experts - 1),
                  moe_aux_loss_coeff=random.choice([1e-2, 3e-3, 2e-4]), norm_epsilon=random.choice([1e-5, 3e-6]),
                  rotary_percent=random.choice([0.25, 0.5, 1.0]), rotary_base=float(random.randint(2, 90) * 10**4),
                  max_position_embeddings=random.randint(5, 40) * 256, vocab_size=128 * random.randint(4, 40),
                  **switches, moe_router_load_balancing_type=random.choice(["aux_loss", "seq_aux_loss", "global_aux_loss"]))
    if card.linear_mixer != "none":
        keys = random.choice([1, 2])
        fields.update(linear_num_key_heads=keys, linear_num_value_heads=keys * random.randint(2, 3),
                      linear_key_head_dim=random.choice([8, 16]), linear_value_head_dim=random.choice([24, 32]),
                      linear_conv_kernel_dim=random.choice([2, 3, 5, 6]), num_layers=card.full_attention_interval
                      * random.randint(1, 3))
    return dataclasses.replace(card, **fields)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_random_cards_megatron_flags_read_back_as_the_same_card(name):
    """``model_flags`` is what the recipes write and the training entry fills in for a card: Megatron's own parser
    must read back every field of a card with random shapes, so no flag carries another field's value (the published
    cards hide such swaps: Qwen3.5's key and value head dims are both 128, its eps the flag's default)."""
    from megatron.oellm.megatron_args import flags_to_argv, model_flags, parse_megatron_argv
    from megatron.oellm.training.card_from_args import card_from_megatron_args

    switches = {field: random.choice([True, False]) for field in SWITCHES}
    for flipped in (False, True):  # each switch once on, once off
        card = _random_card(name, {field: value != flipped for field, value in switches.items()})
        args = parse_megatron_argv(flags_to_argv(model_flags(card)) + ["--seq-length", str(card.seq_length)])
        assert card_from_megatron_args(args, name=card.name) == dataclasses.replace(card, hf_architecture=""), card


def test_the_listed_names_are_each_model_its_tiny_and_its_proxy_of_one_mixer_period():
    """``oellm models`` and the "known:" list of an unknown name offer each published model, its ``-tiny`` test card
    and its one-GPU proxy of one full mixer period, at least two layers (an attention-only model's is 2 layers, a
    hybrid's one attention period: Qwen3.5 4, the CKDA hybrid 6)."""
    from megatron.oellm.cards import list_card_names

    proxies = {"qwen3.5-35b-a3b": 4, "qwen3-30b-a3b": 2, "qwen3-235b-a22b": 2, "oellm-ckda-hybrid": 6}
    assert sorted(list_card_names()) == sorted(
        name for base, layers in proxies.items() for name in (base, f"{base}-tiny", f"{base}-proxy-{layers}L"))
    for base, layers in proxies.items():
        proxy = get_card(f"{base}-proxy-{layers}L")
        assert proxy.num_layers == layers and proxy.num_attention_layers >= 1
