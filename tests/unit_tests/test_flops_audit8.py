"""Mutation audit (round 8) of ``megatron.oellm.flops``: the FLOP counts users compare across clusters.

References, independent of the code under test:

* FLOP counts of the tiny cards derived by hand, matrix by matrix, and written out here term by term;
* megatron-core's own ``vocab_size_with_padding`` for the padded vocabulary.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.flops import (
    FlopError,
    causal_pairs_per_token,
    forward_flops_per_token,
    megatron_padded_vocab,
    pad_vocab,
    training_flops_per_token,
)

# training FLOPs per multiply-add: 2 FLOPs per multiply-add, forward + data gradient + weight gradient
PER_MAC = 2 * 3


def random_documents(seq_length: int) -> list[int]:
    """``seq_length`` tokens cut into 1 to 5 documents at random points."""
    cuts = sorted(random.sample(range(1, seq_length), random.randint(0, min(4, seq_length - 1))))
    return [b - a for a, b in zip([0, *cuts], [*cuts, seq_length], strict=True)]


def hand_causal_pairs(lengths: list[int]) -> int:
    """(query, key) pairs a causal kernel computes over packed documents, counted one query at a time."""
    return sum(position + 1 for length in lengths for position in range(length))


def test_qwen35_tiny_breakdown_matches_a_hand_count_term_by_term():
    """Every component of the GDN hybrid tiny card, derived by hand from its shapes: hidden 64; 4 layers, of which 1
    gated-attention layer (4 query heads, 2 KV groups, 32 channels: q width 128, kv width 64) and 3 GDN layers (2 key
    heads and 4 value heads of 16: key width 32, value width 64; conv kernel 4); MoE on every layer (8 experts of
    32, top-2, shared expert 48 with a gate). A dropped or mis-weighted term changes a component users read."""
    card = get_card("qwen3.5-35b-a3b-tiny")
    assert (card.hidden_size, card.num_layers, card.num_attention_heads, card.num_query_groups, card.kv_channels,
            card.linear_num_key_heads, card.linear_num_value_heads, card.linear_key_head_dim,
            card.linear_value_head_dim, card.linear_conv_kernel_dim, card.num_experts, card.moe_ffn_hidden_size,
            card.moe_router_topk, card.moe_shared_expert_intermediate_size) == (
        64, 4, 4, 2, 32, 2, 4, 16, 16, 4, 8, 32, 2, 48)
    assert card.attention_output_gate and card.moe_shared_expert_gate
    seq_length = random.randint(8, 300)
    lengths = random_documents(seq_length)
    vocab = random.randint(1, 40) * 128
    pairs = hand_causal_pairs(lengths) / seq_length
    expected_macs = {
        "attention_qkv": 1 * 64 * (128 + 64 + 64),       # q, k, v
        "attention_gate": 1 * 64 * 128,                  # sigmoid output gate, one per q channel
        "attention_core": 1 * pairs * (128 + 128),       # QK^T and PV over the causal pairs
        "attention_out": 1 * 128 * 64,
        "gdn_in_proj": 3 * 64 * (32 + 32 + 64 + 64 + 4 + 4),  # q, k, v, z, beta, a
        "gdn_conv": 3 * 4 * (32 + 32 + 64),             # depthwise conv over q, k, v
        "gdn_delta_rule": 3 * 4 * (16 * 16) * 3,         # per value head: S^T k, rank-1 update, S^T q
        "gdn_out_proj": 3 * 64 * 64,
        "moe_router": 4 * 64 * 8,
        "moe_routed_experts": 4 * 2 * (64 * 32 + 64 * 32 + 32 * 64),  # top-2 x (gate, up, down)
        "moe_shared_expert": 4 * (64 * 48 + 64 * 48 + 48 * 64),
        "moe_shared_expert_gate": 4 * 64,
        "logits": 64 * vocab,
    }
    count = training_flops_per_token(card, seq_length, vocab, lengths)
    assert count.breakdown.keys() == expected_macs.keys()
    for name, macs in expected_macs.items():
        assert count.breakdown[name] == pytest.approx(PER_MAC * macs, rel=1e-12), name
    assert count.total == pytest.approx(PER_MAC * sum(expected_macs.values()), rel=1e-12)
    forward = forward_flops_per_token(card, seq_length, vocab, lengths)
    assert {name: 3 * value for name, value in forward.items()} == pytest.approx(count.breakdown, rel=1e-12)


def test_ckda_tiny_breakdown_matches_a_hand_count_term_by_term():
    """The CKDA hybrid tiny card by hand: 6 layers, 1 gated-attention layer, 5 CKDA layers (2 key heads, 4 value
    heads of 16, conv 4, low-rank gates of rank 8: decay gate hidden -> 8 -> heads x key dim, output gate
    hidden -> 8 -> value width), MoE with a gated shared expert on all 6 layers."""
    card = get_card("oellm-ckda-hybrid-tiny")
    assert (card.num_layers, card.num_attention_layers, card.num_linear_layers, card.hidden_size,
            card.linear_num_key_heads, card.linear_num_value_heads, card.linear_key_head_dim,
            card.linear_value_head_dim, card.linear_conv_kernel_dim, card.linear_gate_low_rank_dim,
            card.num_experts, card.moe_ffn_hidden_size, card.moe_router_topk,
            card.moe_shared_expert_intermediate_size) == (6, 1, 5, 64, 2, 4, 16, 16, 4, 8, 8, 32, 2, 48)
    seq_length = random.randint(8, 300)
    vocab = random.randint(1, 40) * 128
    pairs = (seq_length + 1) / 2  # one document: L (L + 1) / 2 pairs over L tokens
    expected_macs = {
        "attention_qkv": 64 * (128 + 64 + 64),
        "attention_gate": 64 * 128,
        "attention_core": pairs * (128 + 128),
        "attention_out": 128 * 64,
        "ckda_in_proj": 5 * 64 * (32 + 32 + 64 + 4),     # q, k, v, beta
        "ckda_decay_gate": 5 * (64 * 8 + 8 * 4 * 16),    # hidden -> rank -> one decay per head and key channel
        "ckda_output_gate": 5 * (64 * 8 + 8 * 64),       # hidden -> rank -> value width
        "ckda_conv": 5 * 4 * (32 + 32 + 64),
        "ckda_delta_rule": 5 * 4 * (16 * 16) * 3,
        "ckda_out_proj": 5 * 64 * 64,
        "moe_router": 6 * 64 * 8,
        "moe_routed_experts": 6 * 2 * 3 * 64 * 32,
        "moe_shared_expert": 6 * 3 * 64 * 48,
        "moe_shared_expert_gate": 6 * 64,
        "logits": 64 * vocab,
    }
    count = training_flops_per_token(card, seq_length, vocab)
    assert count.breakdown.keys() == expected_macs.keys()
    for name, macs in expected_macs.items():
        assert count.breakdown[name] == pytest.approx(PER_MAC * macs, rel=1e-12), name


def test_causal_pairs_of_a_document_histogram_count_every_document():
    """``{length: count}`` packs ``count`` documents of ``length``: each costs its own L (L + 1) / 2 pairs."""
    histogram = {length: random.randint(2, 4) for length in random.sample(range(1, 50), 3)}
    seq_length = sum(length * count for length, count in histogram.items())
    lengths = [length for length, count in histogram.items() for _ in range(count)]
    assert causal_pairs_per_token(seq_length, histogram) == pytest.approx(
        hand_causal_pairs(lengths) / seq_length, rel=1e-12)


def test_padded_vocab_matches_megatrons_own_padding():
    """The logits (and the embedding rows the converters check) use megatron-core's padding: a multiple of
    ``--make-vocab-size-divisible-by`` x TP; a vocabulary already a multiple stays as it is."""
    from megatron.core.tokenizers.utils.build_tokenizer import vocab_size_with_padding

    for _ in range(50):
        vocab, tp = random.randint(1, 300_000), random.choice([1, 2, 4, 8])
        divisor = random.choice([None, 1, 64, 128, 256])
        args = SimpleNamespace(make_vocab_size_divisible_by=divisor or 128, tensor_model_parallel_size=tp, rank=0)
        assert megatron_padded_vocab(vocab, tp, divisor) == vocab_size_with_padding(vocab, args, False)
        multiple = random.randint(1, 2000) * 128
        assert pad_vocab(multiple) == multiple == megatron_padded_vocab(multiple)


def test_gflops_views_are_the_breakdown_in_gflop():
    """``oellm flops`` prints ``gflops_per_token`` / ``gflops_breakdown``: GFLOP."""
    count = training_flops_per_token(get_card("qwen3.5-35b-a3b-tiny"), random.randint(16, 512))
    assert count.gflops_per_token == pytest.approx(count.total * 1e-9, rel=1e-12)
    for name, gflop in count.gflops_breakdown().items():
        assert gflop == pytest.approx(count.breakdown[name] * 1e-9, rel=1e-12)


@pytest.mark.parametrize("seq_length", [0, -random.randint(1, 8192)])
def test_a_non_positive_seq_length_is_refused_naming_seq_length(seq_length):
    """A zero or negative sequence length is refused with a message naming ``seq_length`` and the value given, not
    one about document lengths the user never passed."""
    with pytest.raises(FlopError, match=rf"^seq_length must be positive, got {seq_length}$"):
        training_flops_per_token(get_card("qwen3-30b-a3b-tiny"), seq_length)


def test_an_unknown_gpu_is_refused_naming_every_known_gpu():
    """``--gpu`` with a name we have no peak for: the error lists every GPU we do know (the user picks one from it)
    and says a peak can be given in TFLOP/s instead."""
    from megatron.oellm.peaks import peak_tflops

    unknown = random.choice(["h800", "b200", "H100-SXM", "mi300x"])
    with pytest.raises(ValueError, match=f"unknown GPU '{unknown}'") as error:
        peak_tflops(unknown)
    known = str(error.value).split("known: ", 1)[1]
    assert set(known.split(" (")[0].split(", ")) == {"h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "h200-nvl",
                                                      "gh200", "a100"}
    assert "peak in TFLOP/s" in known
