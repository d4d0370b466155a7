"""``oellm flops --megatron-compatible`` with ``--megatron-flag`` overrides: the count is megatron-core 0.19.2's for
the run those flags describe (a dropped hybrid pattern, the deprecated pattern flag, widths left for ``validate_args``
to derive), and a flag the count cannot honour (a switch given a number, a flag given twice, one that trips
Megatron's assertions or only pads the vocabulary) is refused in one line."""

from __future__ import annotations

import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.flops import FlopError, megatron_flops_per_token, megatron_namespace

GDN_VARIANT_FLAGS = {"experimental_attention_variant": "gated_delta_net", "linear_attention_freq": 4}
"""The GDN flags of a Qwen3.5 run built as a GPTModel (``megatron_flag_sets.GPT_PATH_GDN`` less the hybrid pattern and
the depth, which these tests set themselves)."""


def test_dropping_the_hybrid_pattern_counts_the_cards_decoder_layers_not_the_patterns_symbols():
    """A hybrid card's flags carry --num-layers = the pattern's length (mixer and MoE block: 80 for Qwen3.5's 40
    decoder layers). Dropping the pattern (``hybrid-layer-pattern=none``, the help's example, to count a GPTModel run
    as in the MN5 HybridEP rows) kept that hidden 80, so Megatron's GPT formula counted 80 decoder layers: +83 %
    (34.99 instead of 19.11 GFLOP/token, 243.9 instead of 133.2 TFLOP/s/GPU at 6,971 tokens/s/GPU). A num_layers the
    user gives still wins."""
    card = get_card("qwen3.5-35b-a3b")
    assert megatron_namespace(card, 4096, 262144, hybrid_layer_pattern=None).num_layers == card.num_layers
    implicit = megatron_flops_per_token(card, 4096, 262144, hybrid_layer_pattern=None, **GDN_VARIANT_FLAGS)
    explicit = megatron_flops_per_token(card, 4096, 262144, hybrid_layer_pattern=None, num_layers=40, **GDN_VARIANT_FLAGS)
    assert implicit == explicit
    assert 6971 * implicit / 1e12 == pytest.approx(133.2, rel=1e-3)  # the MN5 report's 8-node row
    layers = random.choice([8, 20, 36])
    assert megatron_namespace(card, 4096, 262144, hybrid_layer_pattern=None, num_layers=layers).num_layers == layers


@pytest.mark.parametrize("flag", ["swiglu", "qk-layernorm", "attention_output_gate", "group-query-attention"])
def test_a_switch_given_a_number_is_one_line_not_megatrons_usage(flag, capsys):
    """``--megatron-flag swiglu=0`` (a switch written with 0 or 1 for false / true) passed the flag check, which let
    Megatron's parser leave the stray value unread, then Megatron's own parse printed its 690-line usage ending in
    "__main__.py: error: unrecognized arguments: 0" instead of the command's one-line error."""
    value = random.choice(["0", "1", "2", "yes"])
    argv = ["flops", "qwen3.5-35b-a3b-tiny", "--seq-length", "128", "--megatron-compatible", "--json",
            "--megatron-flag", f"{flag}={value}"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    name = flag.replace("_", "-")
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err[-300:]
    assert captured.err.startswith(f"oellm flops: error: --megatron-flag {flag}={value}: --{name} is a switch")
    assert f"{flag}=true or {flag}=false" in captured.err


def random_hybrid_pattern(rng: random.Random, mixers: str) -> str:
    """A hybrid pattern of 3 to 12 decoder layers (a mixer symbol from ``mixers`` then ``E`` each), attention first so
    that it differs from every card's own pattern."""
    layers = rng.randint(3, 12)
    return "*E" + "".join(rng.choice(mixers) + "E" for _ in range(layers - 1))


@pytest.mark.parametrize("name, mixers", [("qwen3.5-35b-a3b", "G*"), ("qwen3-30b-a3b", "*")])
def test_the_deprecated_hybrid_override_pattern_is_counted_as_the_runs_layer_pattern(name: str, mixers: str) -> None:
    """megatron-core 0.19.2 still accepts ``--hybrid-override-pattern`` and its ``validate_args`` copies it into
    ``--hybrid-layer-pattern``. ``--megatron-flag hybrid-override-pattern=...`` was parsed and then ignored: the count
    kept the card's pattern (Qwen3.5) or Megatron's GPT formula (Qwen3-30B-A3B), whatever pattern the run had."""
    rng = random.Random(random.random())
    card = get_card(name)
    seq_length, vocab = rng.choice([1024, 2048, 4096, 8192]), 128 * rng.randint(1000, 2100)
    pattern = random_hybrid_pattern(rng, mixers)
    legacy = megatron_flops_per_token(card, seq_length, vocab, hybrid_override_pattern=pattern)
    current = megatron_flops_per_token(card, seq_length, vocab, hybrid_layer_pattern=pattern)
    assert legacy == current
    assert legacy != megatron_flops_per_token(card, seq_length, vocab)


def test_the_deprecated_pattern_beside_the_current_one_is_refused() -> None:
    """megatron-core asserts when both pattern flags are given; the count took one of them silently."""
    pattern = random_hybrid_pattern(random.Random(random.random()), "G*")
    with pytest.raises(FlopError, match="hybrid-override-pattern and hybrid-layer-pattern"):
        megatron_flops_per_token(get_card("qwen3.5-35b-a3b"), 4096, 262144, hybrid_layer_pattern=pattern,
                                 hybrid_override_pattern=pattern)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3.5-35b-a3b"])
def test_dropped_kv_channels_and_ffn_hidden_size_take_megatrons_derived_values(name: str) -> None:
    """A run without ``--kv-channels`` / ``--ffn-hidden-size`` gets hidden / heads and SwiGLU's 2/3 of 4 x hidden
    rounded down to 64 from ``validate_args`` (hidden 2048: kv 2048 / heads, ffn 5440). Dropping them with
    ``--megatron-flag`` left ``None``, which Megatron's GPT formula multiplied: "Megatron's count fails ...
    TypeError", a valid run refused. One dense first layer makes the FFN width count."""
    rng = random.Random(random.random())
    card = get_card(name)
    seq_length = rng.choice([2048, 4096, 8192])
    dense_first = {"moe_layer_freq": f"[0]+[1]*{card.num_layers - 1}"}
    if card.linear_mixer != "none":  # a GPTModel run, the path whose formula reads both widths
        dense_first.update(hybrid_layer_pattern=None, experimental_attention_variant="gated_delta_net",
                           linear_attention_freq=card.full_attention_interval)
    dropped = megatron_flops_per_token(card, seq_length, 262144, kv_channels=None, ffn_hidden_size=None,
                                       **dense_first)
    explicit = megatron_flops_per_token(card, seq_length, 262144, kv_channels=2048 // card.num_attention_heads,
                                        ffn_hidden_size=5440, **dense_first)
    assert card.hidden_size == 2048 and dropped == explicit
    assert dropped != megatron_flops_per_token(card, seq_length, 262144, **dense_first)


def test_kv_channels_megatron_cannot_derive_is_refused() -> None:
    """``validate_args`` asserts that the hidden size splits over the heads when it derives kv-channels."""
    heads = random.choice([24, 40, 48])
    with pytest.raises(FlopError, match="kv-channels"):
        megatron_flops_per_token(get_card("qwen3-30b-a3b"), 4096, 262144, kv_channels=None, num_attention_heads=heads)


def test_a_megatron_flag_given_twice_is_refused_not_overwritten(capsys: pytest.CaptureFixture[str]) -> None:
    """``--megatron-flag num-layers=24 --megatron-flag num_layers=48`` counted 48 layers only, and
    ``group-query-attention=false`` then ``group_query_attention=true`` printed both in "flags changed" while the count
    used the last: one value the user wrote was dropped without a word."""
    first, second = random.sample([8, 16, 24, 32, 40], 2)
    argv = ["flops", "qwen3-30b-a3b", "--seq-length", "4096", "--megatron-compatible",
            "--megatron-flag", f"num-layers={first}", "--megatron-flag", f"num_layers={second}"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"num-layers={first}" in captured.err and f"num_layers={second}" in captured.err


@pytest.mark.parametrize("flag", ["moe-layer-freq=[1,0,1]", "multi-latent-attention=true"])
def test_megatron_flag_that_trips_an_assertion_in_megatrons_count_is_one_line(flag, capsys):
    """An override Megatron's FLOP function asserts on (a --moe-layer-freq list of the wrong length, MLA beside the
    card's GQA) ended in an AssertionError traceback, not the one-line refusal (a layer count below 1 is refused
    before Megatron's count: test_flops_num_layers_override.py)."""
    argv = ["flops", "qwen3-30b-a3b", "--seq-length", "128", "--megatron-compatible", "--megatron-flag", flag]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm flops: error: Megatron's count fails with --megatron-flag") and err.count("\n") == 1


@pytest.mark.parametrize("flag", ["make-vocab-size-divisible-by", "tensor-model-parallel-size"])
def test_megatron_flag_that_only_pads_the_vocabulary_is_refused_not_ignored(flag, capsys):
    """Megatron pads the vocabulary to ``--make-vocab-size-divisible-by`` x TP, but this command takes the padded
    vocabulary from ``--padded-vocab``: either flag as a ``--megatron-flag`` was silently ignored, so the count used a
    vocabulary the run did not have."""
    value = random.choice([2, 4, 8, 1024])
    argv = ["flops", "qwen3-30b-a3b", "--seq-length", "128", "--megatron-compatible", "--megatron-flag",
            f"{flag}={value}"]
    assert cli.main(argv) == 2
    assert "--padded-vocab" in capsys.readouterr().err
