"""Merging a model card into Megatron's command line: fill, keep, conflict (architecture flags the card leaves unset
included: given beside ``--oellm-model`` they were lost without a word), unknown model; and the entry's own flags."""

import argparse
import random

import pytest

from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.cards import CardError, get_card
from megatron.oellm.megatron_args import escape_unformattable_help, megatron_parser, parse_megatron_argv
from megatron.oellm.recipes.megatron_validation import megatron_refusal
from megatron.oellm.training.args import (
    HELP_IN_RUN_REFUSED,
    BackendFlagConflict,
    CardFlagConflict,
    add_oellm_arguments,
    argv_refusal,
    explicit_destinations,
    merge_card_flags,
    with_backend_implementation,
    with_training_defaults,
)

TINY = "qwen3.5-35b-a3b-tiny"
GPT = "qwen3-30b-a3b-tiny"


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


@pytest.mark.parametrize("model, flags, dest", [
    (GPT, ["--moe-shared-expert-intermediate-size", "64"], "moe_shared_expert_intermediate_size"),
    (GPT, ["--moe-shared-expert-intermediate-size", "64", "--moe-shared-expert-gate"],
     "moe_shared_expert_intermediate_size"),
    (GPT, ["--hybrid-layer-pattern", "*E*E*E*E"], "hybrid_layer_pattern"),
    (GPT, ["--experimental-attention-variant", "gated_delta_net", "--linear-attention-freq", "2"],
     "experimental_attention_variant"),
    (TINY, ["--experimental-attention-variant", "gated_delta_net", "--linear-attention-freq", "2"],
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
    hybrid = merge_card_flags(["--oellm-model", TINY, "--moe-shared-expert-intermediate-size", "48"])
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


def test_vocab_size_revocabularies_the_card():
    merged = merge_card_flags(["--oellm-model", TINY, "--vocab-size", "257"])
    assert merged.card.vocab_size == 257 and parse(merged.argv).vocab_size == 257


def test_the_merge_holds_what_the_user_gave_not_what_the_card_filled_in():
    """``user_destinations`` are the destinations of the user's own flags, a card value given again included, and
    none the card filled in: the entry tells a given ``--vocab-size`` from the card's by them."""
    vocab = str(random.randrange(2, 10**6))
    argv = ["--oellm-model", TINY, "--vocab-size", vocab, "--hidden-size", str(get_card(TINY).hidden_size)]
    merged = merge_card_flags(argv)
    assert merged.user_destinations == explicit_destinations(argv) == {"oellm_model", "vocab_size", "hidden_size"}
    assert "num_layers" in explicit_destinations(merged.argv)  # filled in by the card, not given
    assert "vocab_size" not in merge_card_flags(argv[:2]).user_destinations


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


@pytest.mark.parametrize("help_option", ["--help", "-h"])
def test_argv_refusal_refuses_a_help_option_on_which_the_job_would_not_train(help_option, capsys):
    """A help option among a run's flags (first or last: not as another flag's value) makes the parser print its page
    and exit with status 0: a job queued with it would end at start without training, so it is a refusal, and the
    page is not printed meanwhile."""
    merged = merge_card_flags(["--oellm-model", TINY, "--oellm-backend", "torch"]).argv
    merged.insert(random.choice([0, len(merged)]), help_option)
    assert argv_refusal(merged) == HELP_IN_RUN_REFUSED
    assert capsys.readouterr() == ("", "")


def test_argv_refusal_names_the_flag_that_refused_a_word_several_flags_are_given():
    """``--exit-signal`` takes a signal name (megatron converts it outside argparse); a number there must be blamed
    on it, not on an earlier flag that took the same word."""
    merged = merge_card_flags(["--oellm-model", TINY, "--oellm-backend", "torch"]).argv
    number = str(random.randrange(2, 64))
    refused = argv_refusal([*merged, "--train-iters", number, "--log-interval", number, "--exit-signal", number])
    assert refused == f"invalid value {number!r} for --exit-signal"


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


@pytest.mark.parametrize("peak", ["inf", "Infinity", "1e400"])
def test_an_infinite_peak_is_refused_by_the_parser(peak):
    """inf passed the parser; every [oellm] line was then left out (peaks.mfu refuses an infinite peak)."""
    assert argv_refusal(["--oellm-peak-tflops", peak]) == (
        f"argument --oellm-peak-tflops: the peak must be a positive TFLOP/s per GPU, got {peak!r}"
    )
    finite = f"{random.uniform(100, 2000):.1f}"
    assert argv_refusal(["--oellm-peak-tflops", finite]) is None


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


def test_a_hybrid_pattern_cut_into_pipeline_stages_is_the_cards_architecture():
    """The '|' of --hybrid-layer-pattern place layers on pipeline stages: the card's pattern with a cut is no
    conflict (and stays as given); another layer in it still is."""
    pattern = get_card(TINY).hybrid_layer_pattern
    cut = random.randrange(2, len(pattern), 2)  # between decoder layers (a mixer and its MoE block)
    staged = f"{pattern[:cut]}|{pattern[cut:]}"
    merged = merge_card_flags(["--oellm-model", TINY, "--hybrid-layer-pattern", staged])
    assert parse(merged.argv).hybrid_layer_pattern == staged and "hybrid-layer-pattern" not in merged.filled
    other = "E" if pattern[0] != "E" else "G"
    with pytest.raises(CardFlagConflict, match="hybrid_layer_pattern"):
        merge_card_flags(["--oellm-model", TINY, "--hybrid-layer-pattern", f"{other}{staged[1:]}"])


def test_the_sequence_check_leaves_use_checkpoint_args_to_megatron():
    """Under --use-checkpoint-args megatron-core takes max_position_embeddings from the checkpoint, so the command
    line's limit decides nothing; without it the same command line is refused."""
    from megatron.oellm.training.args import check_sequence_length, parse_oellm_argv

    limit = random.randint(64, 4096)
    argv = ["--seq-length", str(limit + random.randint(1, 4096)), "--max-position-embeddings", str(limit)]
    check_sequence_length(parse_oellm_argv([*argv, "--use-checkpoint-args"]))
    with pytest.raises(ValueError, match=f"exceeds --max-position-embeddings max_position_embeddings {limit}"):
        check_sequence_length(parse_oellm_argv(argv))


@pytest.mark.parametrize("flags", [
    # megatron-core 0.19.2 takes the iteration modulo --tensorboard-log-interval only with a tensorboard writer,
    # which it makes only under --tensorboard-dir (training.py: `if writer and (iteration % ... == 0)`)
    ["--tensorboard-log-interval", "0"],
    # --recompute-num-layers counts layers only under --recompute-granularity full (TransformerConfig)
    ["--recompute-num-layers", "0"],
])
def test_an_interval_or_count_megatron_never_divides_by_is_let_through(flags):
    from megatron.oellm.training.args import check_intervals, parse_oellm_argv

    check_intervals(parse_oellm_argv(flags))


def test_a_save_without_a_positive_interval_is_refused_naming_both_flags():
    """megatron-core's validate_args asserts a --save-interval beside --save without a message; the entry names the
    folder, the interval and the fix. Without --save the interval decides nothing and is let through."""
    from megatron.oellm.training.args import check_save_interval, parse_oellm_argv

    folder = f"/scratch/ckpt-{random.randint(0, 10**6)}"
    with pytest.raises(ValueError, match=f"--save {folder} without --save-interval: .*positive one"):
        check_save_interval(parse_oellm_argv(["--save", folder]))
    bad = random.choice([0, -random.randint(1, 100)])
    with pytest.raises(ValueError, match=f"--save {folder} with --save-interval {bad}: "):
        check_save_interval(parse_oellm_argv(["--save", folder, "--save-interval", str(bad)]))
    check_save_interval(parse_oellm_argv(["--save-interval", str(bad)]))
    check_save_interval(parse_oellm_argv(["--save", folder, "--save-interval", str(random.randint(1, 5000))]))


def test_a_retain_interval_off_the_save_grid_is_refused_with_the_next_multiple():
    """Megatron keeps the checkpoints whose iteration is a multiple of --save-retain-interval; one that is not a
    multiple of --save-interval would keep none but the last, so it is refused, suggesting the next multiple."""
    from megatron.oellm.training.args import check_save_interval, parse_oellm_argv

    interval = random.randint(2, 500)
    times = random.randint(1, 9)
    argv = ["--save", "/ckpt", "--save-interval", str(interval), "--save-retain-interval"]
    check_save_interval(parse_oellm_argv([*argv, str(interval * times)]))
    off = interval * times + random.randint(1, interval - 1)
    with pytest.raises(ValueError, match=rf"--save-retain-interval {off} is not a positive multiple of --save-interval "
                                         rf"{interval}: .*\(e\.g\. --save-retain-interval {interval * (times + 1)}\)"):
        check_save_interval(parse_oellm_argv([*argv, str(off)]))
    with pytest.raises(ValueError, match=rf"--save-retain-interval 0 .*--save-retain-interval {interval}\)"):
        check_save_interval(parse_oellm_argv([*argv, "0"]))


def test_fp16_beside_bf16_is_refused_before_megatron():
    """megatron-core's validate_args stops on a bare `assert not args.bf16` on every rank; either flag alone passes."""
    from megatron.oellm.training.args import check_precision, parse_oellm_argv

    with pytest.raises(ValueError, match="--fp16 and --bf16 together"):
        check_precision(parse_oellm_argv(random.sample(["--fp16", "--bf16"], 2)))
    check_precision(parse_oellm_argv([random.choice(["--fp16", "--bf16"])]))
