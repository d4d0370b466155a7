"""Megatron arguments -> card, layout and runtime config fields of the model provider (no GPU needed)."""

import argparse
import random
import re

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import megatron_parser
from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
from megatron.oellm.training.args import add_oellm_arguments, merge_card_flags, parse_oellm_argv
from megatron.oellm.training.model_provider import card_from_args, layout_from_args, runtime_overrides
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain


def parsed(argv):
    """Megatron's parse of ``argv`` (no validation): enough for the card and layout."""
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


def validated(argv, monkeypatch, env=None, world_size=1):
    """Megatron's arguments after ``validate_args`` (answering its device questions as an H100 would)."""
    merged = merge_card_flags(argv)
    args = validate_args_on_cluster(parse_oellm_argv(merged.argv if merged else argv), world_size, env)
    args.padded_vocab_size = args.vocab_size
    return args


def test_layout_and_runtime_fields_follow_megatrons_flags(monkeypatch):
    args = validated(["--oellm-model", "qwen3-30b-a3b-tiny", "--tensor-model-parallel-size", "2",
                      "--expert-model-parallel-size", "4", "--sequence-parallel", "--recompute-granularity", "full",
                      "--recompute-method", "uniform", "--recompute-num-layers", "1", "--init-method-std", "0.0123",
                      "--moe-router-force-load-balancing", "--moe-token-dispatcher-type", "alltoall",
                      "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--micro-batch-size", "1", "--global-batch-size", "8",
                      "--seq-length", "128", "--bf16"], monkeypatch, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                     world_size=8)
    card = card_from_args(args)
    layout = layout_from_args(args)
    assert (layout.tp, layout.ep, layout.sp, layout.pp) == (2, 4, True, 1)
    overrides = runtime_overrides(args, card, layout)
    assert overrides["init_method_std"] == pytest.approx(0.0123) and overrides["recompute_granularity"] == "full"
    assert overrides["moe_router_force_load_balancing"] is True
    assert overrides["apply_rope_fusion"] is False and overrides["gradient_accumulation_fusion"] is False
    assert "num_moe_experts" not in overrides and "hidden_size" not in overrides  # the card owns the architecture
    from megatron.oellm.models import spec_builder

    config = spec_builder(card.family).transformer_config(card, layout, args.params_dtype, **overrides)
    assert config.moe_router_force_load_balancing and config.recompute_granularity == "full"
    assert config.num_moe_experts == card.num_experts and config.tensor_model_parallel_size == 2


def test_every_qwen3_5_recipe_flag_reaches_the_transformer_config(monkeypatch):
    """The MN5 settings that used to be dropped: forced balancing, HybridEP on 16 SMs, flash attention, recompute."""
    from pathlib import Path

    from megatron.core.transformer.enums import AttnBackend

    from megatron.oellm.models import spec_builder
    from megatron.oellm.recipes.resolve import resolve_row
    from megatron.oellm.recipes.toml_loading import load_recipe

    recipe = load_recipe(Path(__file__).parents[3] / "examples/oellm/qwen3_5_35b_a3b_mn5_strong.toml")
    resolved = resolve_row(recipe, recipe.row(2))
    args = validated([*resolved.argv, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer"], monkeypatch, env=recipe.cluster.env,
                     world_size=resolved.world_size)
    card, layout = card_from_args(args), layout_from_args(args)
    config = spec_builder(card.family).transformer_config(card, layout, args.params_dtype,
                                                          **runtime_overrides(args, card, layout))
    assert config.moe_router_force_load_balancing
    assert (config.moe_token_dispatcher_type, config.moe_flex_dispatcher_backend) == ("flex", "hybridep")
    assert config.moe_hybridep_num_sms == 16
    assert config.attention_backend == AttnBackend.flash
    # 2 HybridModel layers (mixer, MoE) per unit: the report's GPTModel layer (test_hybrid_recompute_units.py)
    assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == (
        "full", "uniform", 2)
    assert config.num_layers == 80 and config.pipeline_model_parallel_size == 4
    assert config.virtual_pipeline_model_parallel_size == 2


def test_uneven_hybrid_stages_of_the_mn5_recipe_reach_the_model_layout():
    """The recipe sends the 6/6/6/3/6/6/6/1 split as '|' in --hybrid-layer-pattern; the model must build that split."""
    from pathlib import Path

    from megatron.oellm.recipes.resolve import resolve_row
    from megatron.oellm.recipes.toml_loading import load_recipe

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


def test_the_start_up_log_names_the_backend_and_the_rms_norm_path(monkeypatch):
    from megatron.oellm.backends import selection
    from megatron.oellm.training.model_provider import backend_description

    monkeypatch.setattr(selection, "resolve_backend", lambda name: "torch" if name in ("auto", "torch") else "te")
    monkeypatch.delenv("OELLM_EAGER_RMS_NORM", raising=False)
    assert backend_description("auto") == "backend auto -> torch, RMSNorm triton"
    assert backend_description("te") == "backend te"
    monkeypatch.setenv("OELLM_EAGER_RMS_NORM", "1")
    assert backend_description("torch") == "backend torch, RMSNorm eager"


def test_the_model_provider_builds_the_card_with_the_named_backend_and_logs_it(monkeypatch, capsys):
    """The provider as Megatron calls it, with the GPU-only model build replaced by a recorder."""
    import megatron.training

    from megatron.oellm.models import spec_builder
    from megatron.oellm.training.model_provider import model_provider, moe_permutation_description

    args = validated(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--micro-batch-size", "1",
                      "--global-batch-size", "8", "--seq-length", "128", "--bf16"], monkeypatch)
    calls = []
    monkeypatch.setattr(megatron.training, "get_args", lambda: args)
    monkeypatch.setattr(spec_builder("qwen3_moe"), "build_model", lambda *a, **k: calls.append((a, k)) or "model")
    monkeypatch.delenv("OELLM_EAGER_RMS_NORM", raising=False)
    monkeypatch.delenv("OELLM_UPSTREAM_MOE_PERMUTATION", raising=False)
    assert model_provider(pre_process=True, post_process=False) == "model"
    (card, _, backend), kwargs = calls[0]
    assert card.name == "qwen3-30b-a3b-tiny" and backend == "torch" and kwargs["post_process"] is False
    assert ("> building qwen3-30b-a3b-tiny (qwen3_moe, backend torch, RMSNorm triton, MoE permutation sorted, "
            "router GEMMs bf16)"
            in capsys.readouterr().out)
    fused, dense = argparse.Namespace(**vars(args)), argparse.Namespace(**vars(args))
    fused.moe_permute_fusion, dense.num_experts = True, None
    assert moe_permutation_description(fused) == ", MoE permutation fused"
    assert moe_permutation_description(dense) == ""


UNEVEN_235B = ["--oellm-model", "qwen3-235b-a22b", "--pipeline-model-parallel-size", "8", "--micro-batch-size", "1",
               "--global-batch-size", "8", "--seq-length", "128", "--bf16", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer"]
"""Qwen3-235B-A22B's 94 layers over 8 pipeline ranks: no even split."""


def test_megatrons_uneven_split_flags_are_refused_with_the_equivalent_pipeline_layout(monkeypatch):
    """Megatron accepts 10 + 6 x 12 + 12 layers through its first/last flags; the spec builders place layers by an
    even split or a pipeline layout, so the entry refuses the flags and names the layout that places the same layers,
    which Megatron and the layout check then accept."""
    from megatron.oellm.training.entry import check_layout

    uneven = ["--decoder-first-pipeline-num-layers", "10", "--decoder-last-pipeline-num-layers", "12"]
    args = validated([*UNEVEN_235B, *uneven], monkeypatch, world_size=8)
    layout = "Et*10|t*12|t*12|t*12|t*12|t*12|t*12|t*12L"
    with pytest.raises(ValueError, match=r"--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers: "
                                         rf".*give --pipeline-model-parallel-layout '{re.escape(layout)}' instead"):
        check_layout(args)
    check_layout(validated([*UNEVEN_235B, "--pipeline-model-parallel-layout", layout], monkeypatch, world_size=8))


def test_first_and_last_stage_sizes_over_two_stages_get_their_own_layout(monkeypatch):
    """At PP 2 the first and last stage sizes are the whole split, with no middle stage and no middle layer, which
    megatron-core's config accepts; the refusal names that layout (not an even example), and Megatron and the
    layout check accept it. Sizes that leave layers to no middle stage get the even example."""
    import random

    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron.oellm.training.entry import check_layout

    first = random.randint(1, 47)
    qwen3_pp2 = ["--oellm-model", "qwen3-30b-a3b", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
                 "--global-batch-size", "2", "--seq-length", "128", "--bf16", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer"]
    TransformerConfig(num_layers=48, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=2,
                      num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=48 - first,
                      pipeline_dtype=torch.bfloat16)
    split = ["--decoder-first-pipeline-num-layers", str(first), "--decoder-last-pipeline-num-layers", str(48 - first)]
    layout = f"Et*{first}|t*{48 - first}L"
    with pytest.raises(ValueError, match=rf"give --pipeline-model-parallel-layout '{re.escape(layout)}' instead"):
        check_layout(validated([*qwen3_pp2, *split], monkeypatch, world_size=2))
    check_layout(validated([*qwen3_pp2, "--pipeline-model-parallel-layout", layout], monkeypatch, world_size=2))
    short = ["--decoder-first-pipeline-num-layers", str(first), "--decoder-last-pipeline-num-layers", str(47 - first)]
    with pytest.raises(ValueError, match=r"\(e\.g\. 'Et\*24\|t\*24L'\)"):
        check_layout(parsed([*qwen3_pp2, *short]))


def test_split_flags_without_an_equivalent_layout_get_an_even_example_and_hybrids_their_pattern(monkeypatch):
    from megatron.oellm.training.entry import check_layout

    qwen3_pp7 = ["--oellm-model", "qwen3-30b-a3b", "--pipeline-model-parallel-size", "7", "--micro-batch-size", "1",
                 "--global-batch-size", "7", "--seq-length", "128", "--bf16", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer"]
    accounted = validated([*qwen3_pp7, "--account-for-loss-in-pipeline-split"], monkeypatch, world_size=7)
    with pytest.raises(ValueError, match=r"--account-for-loss-in-pipeline-split: .*\(e\.g\. "
                                         r"'Et\*7\|t\*7\|t\*7\|t\*7\|t\*7\|t\*7\|t\*6L'\)"):
        check_layout(accounted)
    hybrid = parsed(["--oellm-model", "qwen3.5-35b-a3b-tiny", "--pipeline-model-parallel-size", "2",
                     "--decoder-first-pipeline-num-layers", "1"])
    with pytest.raises(ValueError, match="--decoder-first-pipeline-num-layers: .*'|' in --hybrid-layer-pattern"):
        check_layout(hybrid)


def test_the_layout_check_judges_the_runs_sequence_length_not_the_cards():
    """Qwen3-30B-A3B's card says 4096 tokens; a run of 4098 at TP 4 with sequence parallelism cannot split its tokens
    evenly over TP (megatron-core would assert at the first forward step, on the GPU), 4100 can."""
    from megatron.oellm.training.entry import check_layout

    run = ["--oellm-model", "qwen3-30b-a3b", "--tensor-model-parallel-size", "4", "--sequence-parallel"]
    uneven = parsed([*run, "--seq-length", "4098"])
    assert card_from_args(uneven).seq_length == 4098
    with pytest.raises(ValueError, match=r"seq_length \(4098\) is not divisible by tp \(4\)"):
        check_layout(uneven)
    check_layout(parsed([*run, "--seq-length", "4100"]))


SELECTIVE_RECOMPUTE = ["--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length", "128", "--bf16",
                       "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--recompute-granularity", "selective",
                       "--recompute-modules"]
"""A run with selective recompute; the modules follow."""

SHARED_RECOMPUTE_MODULES = ["core_attn", "layernorm", "moe", "moe_act"]
"""Selective-recompute modules that every card family's models have (megatron-core's config and
``absent_recompute_modules`` accept them for both families)."""


def _modules(*required: str) -> list[str]:
    """A random non-empty selection of :data:`SHARED_RECOMPUTE_MODULES`, with ``required`` at random places."""
    modules = random.sample(SHARED_RECOMPUTE_MODULES, random.randint(1, len(SHARED_RECOMPUTE_MODULES))) + [*required]
    random.shuffle(modules)
    return modules


def test_gdn_norm_out_on_a_qwen3_5_card_is_refused_naming_the_hybrid_model_limit(monkeypatch):
    """The card's GDN layers are a HybridModel's, which megatron-core's config check refuses gdn_norm_out for,
    naming a GPT-path variant the card never sets; the entry's check says so and what to drop, before the config."""
    from megatron.oellm.training.model_provider import check_model_config, check_recompute_modules

    args = validated(["--oellm-model", "qwen3.5-35b-a3b-tiny", *SELECTIVE_RECOMPUTE, *_modules("gdn_norm_out")],
                     monkeypatch)
    with pytest.raises(ValueError, match=r"^--recompute-modules gdn_norm_out: model card qwen3\.5-35b-a3b-tiny is a "
                                         r"HybridModel with Gated DeltaNet layers .* only for GPT models with "
                                         r"--experimental-attention-variant gated_delta_net, not for HybridModel's "
                                         r"GDN layers.*drop gdn_norm_out from --recompute-modules$"):
        check_recompute_modules(args)
    # what it anticipates: megatron-core 0.19.2's own refusal once the config is built (patches/gdn-norm-out-hybrid.md)
    with pytest.raises(ValueError, match=r"only supported with experimental_attention_variant='gated_delta_net'"):
        check_model_config(args, card_from_args(args))


def test_gdn_norm_out_on_a_qwen3_moe_card_is_refused_by_the_entry_as_absent(monkeypatch, capsys):
    """A Qwen3 MoE card has no GDN layers: the entry refuses the module in one line before pretrain."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main(["--oellm-model", "qwen3-30b-a3b-tiny", *SELECTIVE_RECOMPUTE, *_modules("gdn_norm_out")]) == 2
    error = capsys.readouterr().err.splitlines()
    assert len(error) == 1, error
    assert error[0].startswith(f"{entry.PROG}: error: --recompute-modules gdn_norm_out: model card qwen3-30b-a3b-tiny "
                               "has no Gated DeltaNet layers"), error
    assert error[0].endswith("drop gdn_norm_out from --recompute-modules"), error


@pytest.mark.parametrize("model", ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"])
def test_other_recompute_modules_still_reach_the_model_config(model, monkeypatch):
    """Only gdn_norm_out is refused: the other modules pass the check and reach megatron-core's config."""
    from megatron.oellm.models import spec_builder
    from megatron.oellm.training.model_provider import check_recompute_modules

    modules = _modules()
    args = validated(["--oellm-model", model, *SELECTIVE_RECOMPUTE, *modules], monkeypatch)
    check_recompute_modules(args)
    card, layout = card_from_args(args), layout_from_args(args)
    config = spec_builder(card.family).transformer_config(card, layout, args.params_dtype,
                                                          **runtime_overrides(args, card, layout))
    assert (config.recompute_granularity, config.recompute_modules) == ("selective", modules)


def test_layer_offloading_is_refused_for_the_hybrid_model_only():
    """megatron-core's TransformerBlock (the GPT models) opens the layer-offload context; HybridStack (Qwen3.5) has no
    mention of it, so --cpu-offloading-num-layers would change nothing there."""
    import inspect

    from megatron.core.models.hybrid import hybrid_block
    from megatron.core.transformer import transformer_block

    from megatron.oellm.training.model_provider import check_layer_offloading

    assert "cpu_offloading" in inspect.getsource(transformer_block.TransformerBlock)
    assert "offload" not in inspect.getsource(hybrid_block)
    layers = random.randint(1, 3)
    hybrid = parsed(["--oellm-model", "qwen3.5-35b-a3b-tiny", "--cpu-offloading-num-layers", str(layers)])
    with pytest.raises(ValueError, match=rf"--cpu-offloading-num-layers {layers}: qwen3.5-35b-a3b-tiny is a "
                                         "megatron-core HybridModel, whose layer stack does not offload"):
        check_layer_offloading(hybrid, card_from_args(hybrid))
    check_layer_offloading(parsed(["--oellm-model", "qwen3.5-35b-a3b-tiny"]), get_card("qwen3.5-35b-a3b-tiny"))
    gpt = parsed(["--oellm-model", "qwen3-30b-a3b-tiny", "--cpu-offloading-num-layers", str(layers)])
    check_layer_offloading(gpt, card_from_args(gpt))


def test_a_world_size_the_expert_layout_does_not_divide_is_refused_before_megatron_starts(monkeypatch):
    """Megatron's validate_args checks the world size against TP x PP x CP only: 12 GPUs at PP 2 and EP 4 (ETP x EP x
    PP = 8) passed it, and megatron-core's parallel state then raised on every rank after torch.distributed was up.
    The entry's layout check now takes the world size; 16 GPUs pass."""
    from megatron.oellm.models.parallel import ParallelLayoutError
    from megatron.oellm.training.entry import check_layout

    qwen3 = ["--oellm-model", "qwen3-30b-a3b", "--pipeline-model-parallel-size", "2", "--expert-model-parallel-size",
             "4", "--micro-batch-size", "1", "--seq-length", "128", "--bf16", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer"]
    with pytest.raises(ParallelLayoutError, match=r"^world size 12 is not divisible by etp x ep x pp = 8; change the "
                                                  r"GPU count, ep, etp or pp$"):
        check_layout(validated([*qwen3, "--global-batch-size", "6"], monkeypatch, world_size=12))
    check_layout(validated([*qwen3, "--global-batch-size", "8"], monkeypatch, world_size=16))
