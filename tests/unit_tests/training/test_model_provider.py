"""Megatron arguments -> card, layout and runtime config fields of the model provider (no GPU needed)."""

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import megatron_parser
from megatron.oellm.training.args import add_oellm_arguments, merge_card_flags
from megatron.oellm.training.model_provider import card_from_args, layout_from_args, runtime_overrides


def parsed(argv):
    merged = merge_card_flags(argv)
    args = megatron_parser(add_oellm_arguments).parse_args(merged.argv if merged else argv)
    args.padded_vocab_size = 640  # these two are set by Megatron's validate_args / tokenizer (need CUDA)
    args.virtual_pipeline_model_parallel_size = None
    return args


def test_named_card_gets_megatrons_padded_vocabulary():
    card = card_from_args(parsed(["--oellm-model", "qwen3.5-35b-a3b-tiny"]))
    assert card == get_card("qwen3.5-35b-a3b-tiny").with_vocab(640)


def test_card_without_name_is_read_from_the_flags():
    tiny = get_card("qwen3-30b-a3b-tiny")
    from megatron.oellm.megatron_args import flags_to_argv, model_flags

    card = card_from_args(parsed(flags_to_argv(model_flags(tiny))))
    assert card.num_experts == tiny.num_experts and card.family == "qwen3_moe" and card.vocab_size == 640


def test_layout_and_runtime_fields_follow_megatrons_flags():
    args = parsed(["--oellm-model", "qwen3-30b-a3b-tiny", "--tensor-model-parallel-size", "2",
                   "--expert-model-parallel-size", "4", "--sequence-parallel", "--recompute-granularity", "full",
                   "--init-method-std", "0.0123", "--oellm-backend", "torch"])
    layout = layout_from_args(args)
    assert (layout.tp, layout.ep, layout.sp, layout.pp) == (2, 4, True, 1)
    overrides = runtime_overrides(args)
    assert overrides["init_method_std"] == pytest.approx(0.0123) and overrides["recompute_granularity"] == "full"
    assert "gradient_accumulation_fusion" not in overrides  # TE-only kernel, torch backend


def test_uneven_hybrid_stages_of_the_mn5_recipe_reach_the_model_layout():
    """The recipe sends the 6/6/6/3/6/6/6/1 split as '|' in --hybrid-layer-pattern; the model must build that split."""
    from pathlib import Path

    from megatron.oellm.recipes.config import load_recipe
    from megatron.oellm.recipes.resolve import resolve_row

    recipe = load_recipe(Path(__file__).parents[3] / "examples/oellm/qwen3_5_35b_a3b_mn5_strong.toml")
    args = parsed(resolve_row(recipe, recipe.row(2)).argv)
    layout = layout_from_args(args)
    assert layout.decoder_layers_per_stage(40) == [6, 6, 6, 3, 6, 6, 6, 1]
    assert (layout.pp, layout.vpp_size) == (4, 2)


def test_named_card_accepts_a_pattern_with_pipeline_stages():
    card = get_card("qwen3.5-35b-a3b")
    staged = "|".join([card.hybrid_layer_pattern[:40], card.hybrid_layer_pattern[40:]])
    merged = merge_card_flags(["--oellm-model", card.name, "--hybrid-layer-pattern", staged])
    assert merged is not None and "hybrid-layer-pattern" not in merged.filled
