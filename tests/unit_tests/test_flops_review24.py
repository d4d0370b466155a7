"""Session-24 review of the FLOP accounting and planning: each test reproduces one defect found by hand."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.flops import megatron_flops_per_token, megatron_namespace

GPT_PATH_GDN = {"experimental_attention_variant": "gated_delta_net", "linear_attention_freq": 4}
"""Megatron flags of a Qwen3.5 run built as a GPTModel with GDN, besides dropping the hybrid pattern."""


def test_dropping_the_hybrid_pattern_counts_the_cards_decoder_layers_not_the_patterns_symbols():
    """A hybrid card's flags carry --num-layers = the pattern's length (mixer and MoE block: 80 for Qwen3.5's 40
    decoder layers). Dropping the pattern (``hybrid-layer-pattern=none``, the help's example, to count a GPTModel run
    as in the MN5 HybridEP rows) kept that hidden 80, so Megatron's GPT formula counted 80 decoder layers: +83 %
    (34.99 instead of 19.11 GFLOP/token, 243.9 instead of 133.2 TFLOP/s/GPU at 6,971 tokens/s/GPU). A num_layers the
    user gives still wins."""
    card = get_card("qwen3.5-35b-a3b")
    assert megatron_namespace(card, 4096, 262144, hybrid_layer_pattern=None).num_layers == card.num_layers
    implicit = megatron_flops_per_token(card, 4096, 262144, hybrid_layer_pattern=None, **GPT_PATH_GDN)
    explicit = megatron_flops_per_token(card, 4096, 262144, hybrid_layer_pattern=None, num_layers=40, **GPT_PATH_GDN)
    assert implicit == explicit
    assert 6971 * implicit / 1e12 == pytest.approx(133.2, rel=1e-3)  # the MN5 report's 8-node row
    layers = random.choice([8, 20, 36])
    assert megatron_namespace(card, 4096, 262144, hybrid_layer_pattern=None, num_layers=layers).num_layers == layers


@pytest.mark.parametrize("flag", ["swiglu", "qk-layernorm", "attention_output_gate", "group-query-attention"])
def test_a_switch_given_a_number_is_one_line_not_megatrons_usage(flag, capsys):
    """``--megatron-flag swiglu=0`` (a switch written with 0 or 1 for false / true) passed the flag check, which let
    Megatron's parser leave the stray value unread, then Megatron's own parse printed its 690-line usage ending in
    "__main__.py: error: unrecognized arguments: 0" instead of the command's one-line error."""
    from megatron.oellm import cli

    value = random.choice(["0", "1", "2", "yes"])
    argv = ["flops", "qwen3.5-35b-a3b-tiny", "--seq-length", "128", "--megatron-compatible", "--json",
            "--megatron-flag", f"{flag}={value}"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    name = flag.replace("_", "-")
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err[-300:]
    assert captured.err.startswith(f"oellm flops: error: --megatron-flag {flag}={value}: --{name} is a switch")
    assert f"{flag}=true or {flag}=false" in captured.err
