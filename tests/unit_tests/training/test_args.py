"""Merging a model card into Megatron's command line: fill, keep, conflict, unknown model."""

import argparse

import pytest

from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.cards import CardError, get_card
from megatron.oellm.megatron_args import escape_unformattable_help, megatron_parser, parse_megatron_argv
from megatron.oellm.training.args import (
    BackendFlagConflict,
    CardFlagConflict,
    add_oellm_arguments,
    argv_refusal,
    merge_card_flags,
    with_backend_implementation,
    with_training_defaults,
)

TINY = "qwen3.5-35b-a3b-tiny"


def parse(argv):
    return megatron_parser(add_oellm_arguments).parse_args(argv)


def test_card_fills_every_unspecified_architecture_flag():
    merged = merge_card_flags(["--oellm-model", TINY, "--micro-batch-size", "3"])
    args = parse(merged.argv)
    card = get_card(TINY)
    assert (args.hidden_size, args.num_attention_heads, args.num_query_groups) == (64, 4, 2)
    assert args.kv_channels == card.kv_channels and args.num_experts == card.num_experts
    assert args.hybrid_layer_pattern == card.hybrid_layer_pattern
    assert args.qk_layernorm and args.attention_output_gate and not args.add_bias_linear
    assert args.vocab_size == card.vocab_size
    assert args.micro_batch_size == 3  # the user's own flags survive


def test_user_flags_equal_to_the_card_are_kept_not_duplicated():
    merged = merge_card_flags(["--oellm-model", TINY, "--hidden-size", "64", "--disable-bias-linear"])
    assert "hidden-size" not in merged.filled and "disable-bias-linear" not in merged.filled
    assert merged.argv.count("--hidden-size") == 1


def test_contradicting_value_is_an_error_naming_both_values():
    with pytest.raises(CardFlagConflict, match=r"hidden_size=96.*hidden_size=64"):
        merge_card_flags(["--oellm-model", TINY, "--hidden-size", "96"])


def test_contradicting_boolean_flag_is_an_error():
    # Qwen3 MoE has no attention output gate: asking for one contradicts the card.
    with pytest.raises(CardFlagConflict, match="attention_output_gate"):
        merge_card_flags(["--oellm-model", "qwen3-30b-a3b-tiny", "--attention-output-gate"])


@pytest.mark.parametrize("model", [TINY, "qwen3-30b-a3b-tiny"])
def test_the_deprecated_hybrid_override_pattern_is_refused_naming_hybrid_layer_pattern(model):
    """megatron-core copies --hybrid-override-pattern into --hybrid-layer-pattern and raises a traceback on every rank
    when both are given: the card fills the latter (or, for a GPT card, builds no hybrid model at all)."""
    pattern = get_card(TINY).hybrid_layer_pattern
    with pytest.raises(CardFlagConflict, match="--hybrid-override-pattern.*--hybrid-layer-pattern"):
        merge_card_flags(["--oellm-model", model, "--hybrid-override-pattern", pattern])


def test_vocab_size_revocabularies_the_card():
    merged = merge_card_flags(["--oellm-model", TINY, "--vocab-size", "257"])
    assert merged.card.vocab_size == 257 and parse(merged.argv).vocab_size == 257


def test_training_defaults_fill_dropout_but_keep_a_given_value():
    assert parse(with_training_defaults(["--micro-batch-size", "2"])).hidden_dropout == 0.0
    args = parse(with_training_defaults(["--hidden-dropout", "0.1"]))
    assert args.hidden_dropout == 0.1 and args.attention_dropout == 0.0


def test_unknown_model_is_an_error_listing_known_names():
    with pytest.raises(CardError, match="unknown model.*qwen3.5-35b-a3b"):
        merge_card_flags(["--oellm-model", "qwen9-nope"])


def test_no_model_means_no_merge():
    assert merge_card_flags(["--micro-batch-size", "2"]) is None


def test_merged_argv_is_accepted_by_megatrons_own_parser_plus_ours():
    merged = merge_card_flags(["--oellm-model", TINY, "--oellm-backend", "torch"])
    stripped = [a for a in merged.argv if a not in ("--oellm-model", TINY, "--oellm-backend", "torch")]
    assert parse_megatron_argv(stripped).num_experts == get_card(TINY).num_experts


def test_argv_refusal_names_what_the_parser_refuses_and_passes_what_it_takes():
    merged = merge_card_flags(["--oellm-model", TINY, "--oellm-backend", "torch"]).argv
    assert argv_refusal(merged) is None
    assert argv_refusal([*merged, "--atention-backend", "flash"]) == "unrecognized arguments: --atention-backend flash"
    assert argv_refusal([*merged, "--attention-backend", "flashy"]) == "invalid value 'flashy' for --attention-backend"
    assert argv_refusal([*merged, "--num-layers", "two"]) == "argument --num-layers: invalid int value: 'two'"
    assert argv_refusal([*merged, "--oellm-backend", "jax"]).startswith("argument --oellm-backend: invalid choice")


def test_torch_backend_gets_the_local_implementation_unless_given():
    argv = with_backend_implementation(["--oellm-backend", "torch"])
    assert parse(argv).transformer_impl == "local"
    given = ["--oellm-backend", "torch", "--transformer-impl", "local"]
    assert with_backend_implementation(given) == given


def test_torch_backend_with_transformer_engine_implementation_is_an_error():
    with pytest.raises(BackendFlagConflict, match="--transformer-impl transformer_engine"):
        with_backend_implementation(["--oellm-backend", "torch", "--transformer-impl", "transformer_engine"])


@pytest.mark.skipif(transformer_engine_import_error() is None, reason="auto resolves to TE where TE imports")
def test_auto_backend_without_transformer_engine_runs_the_local_implementation():
    assert parse(with_backend_implementation([])).transformer_impl == "local"


def test_training_defaults_fill_eval_interval_for_real_data():
    assert parse(with_training_defaults(["--data-path", "/data/corpus"])).eval_interval == 1000
    assert parse(with_training_defaults(["--eval-interval", "50"])).eval_interval == 50


def test_help_of_the_training_entry_formats(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` prints instead of raising on megatron-core 0.19.2's bare ``%`` in one help text."""
    with pytest.raises(SystemExit) as stop:
        parse(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--oellm-backend" in out and "10%)" in out


def test_only_unformattable_help_texts_are_escaped() -> None:
    """A help text with argparse's own ``%(default)s`` field keeps it; a bare ``%`` is doubled."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ratio", default=3, help="share (default %(default)s)")
    parser.add_argument("--headroom", help="1.10 = 10%)")
    assert escape_unformattable_help(parser) == ["--headroom"]
    assert "share (default 3)" in parser.format_help() and "1.10 = 10%)" in parser.format_help()


@pytest.mark.parametrize("peak", ["0", "-989", "nan"])
def test_a_peak_that_is_not_positive_is_refused_by_the_parser(peak):
    """The MFU divides by the peak: 0 passed the parser and stopped the run at its first [oellm] line."""
    assert argv_refusal(["--oellm-peak-tflops", peak]) == (
        f"argument --oellm-peak-tflops: the peak must be a positive TFLOP/s per GPU, got {peak!r}"
    )
    assert argv_refusal(["--oellm-peak-tflops", "lots"]) == "argument --oellm-peak-tflops: invalid number: 'lots'"
    assert parse(["--oellm-peak-tflops", "494.5"]).oellm_peak_tflops == 494.5


def test_the_start_up_line_names_the_imported_code_and_its_versions():
    """A checkout on PYTHONPATH shadows an image's installed copy; the log's first line says which one ran."""
    import re
    from pathlib import Path

    import megatron.core

    from megatron.oellm.training import entry

    line = entry.provenance()
    package_dir = Path(entry.__file__).resolve().parent.parent  # .../megatron/oellm, wherever it was imported from
    core_dir = Path(megatron.core.__file__).resolve().parent
    # no "+<commit>": megatron-core takes it from the git repository around its folder, not from its own source
    assert re.fullmatch(rf"> megatron-oellm \d+\.\d+\.\d+\S* from {re.escape(str(package_dir))}, "
                        rf"megatron-core 0\.19\.2 from {re.escape(str(core_dir))}", line), line
