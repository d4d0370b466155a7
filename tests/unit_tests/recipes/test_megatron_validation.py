"""Every recipe row passes megatron-core 0.19.2's own ``validate_args`` (the check ``pretrain_*`` runs first).

Megatron's parser accepting a flag is not enough: ``validate_args`` refuses combinations (e.g. Transformer Engine's
fused cross entropy, disabled in 0.19.2), and a refused row would only fail after its SLURM job started.
Megatron asks the GPU's architecture and Transformer Engine's version there; the tests answer as the recipes'
clusters would (H100 / GH200: sm_90; the image's TE, recent enough for every version gate).
"""

from pathlib import Path

import pytest

from megatron.oellm.recipes.megatron_validation import (
    check_model_config_on_cluster,
    megatron_refusal,
    validate_args_on_cluster,
    validate_on_cluster,
)
from megatron.oellm.recipes.resolve import resolve_row
from megatron.oellm.recipes.toml_loading import load_recipe
from megatron.oellm.training.args import parse_oellm_argv

RECIPES = sorted(p for p in (Path(__file__).parents[3] / "examples/oellm").glob("*.toml")
                 if not p.name.startswith("_"))
ROWS = [(path, number) for path in RECIPES for number in range(1, len(load_recipe(path).rows) + 1)]


@pytest.mark.parametrize("path, number", ROWS, ids=[f"{p.stem}-row{n}" for p, n in ROWS])
def test_row_passes_megatron_validate_args(path, number):
    """The checks ``--dry-run`` / ``--submit`` make (:func:`validate_on_cluster`, then the model's
    ``TransformerConfig``) on every shipped row."""
    recipe = load_recipe(path)
    if recipe.model.startswith("oellm-ckda-hybrid"):
        pytest.skip("the CKDA layer symbol 'K' is not megatron-core's; the CKDA issue adds it")
    resolved = resolve_row(recipe, recipe.row(number))
    args = validate_on_cluster(resolved.argv, resolved.world_size, recipe.cluster.env)
    check_model_config_on_cluster(args, resolved.world_size, recipe.cluster.env)
    assert args.data_parallel_size * args.tensor_model_parallel_size * args.pipeline_model_parallel_size \
        * args.context_parallel_size == resolved.world_size


def test_the_check_leaves_the_process_as_it_found_it(monkeypatch):
    """The GPU, Transformer Engine, backend, logging and environment answers are undone after the check, whatever it
    found."""
    import logging
    import os

    import torch
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import transformer_config
    from megatron.core.transformer.moe import moe_utils
    from megatron.training import arguments

    from megatron.oellm.backends import selection

    def answers():
        return (torch.cuda.get_device_capability, arguments.get_device_arch_version, arguments.is_te_min_version,
                transformer_config.is_te_min_version, rope_utils.fused_apply_rotary_pos_emb, moe_utils.fused_permute,
                selection.resolve_backend, logging.root.manager.disable, dict(os.environ))

    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    before = answers()
    assert megatron_refusal(resolved.argv, resolved.world_size, recipe.cluster.env) is None
    assert megatron_refusal([*resolved.argv, "--recompute-granularity", "selective"], resolved.world_size,
                            recipe.cluster.env) == ("AssertionError: recompute method is not yet supported for "
                                                    "selective recomputing granularity")
    assert answers() == before


def test_an_explicit_torch_backend_gets_the_entrys_feature_check():
    """``--oellm-backend torch`` does not depend on the machine: a setting it refuses at start is refused here (the
    row's ``--attention-backend flash`` among them: the torch-native attention reads none)."""
    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    torch_argv = [*resolved.argv, "--oellm-backend", "torch"]
    refusal = megatron_refusal(torch_argv, resolved.world_size, recipe.cluster.env)
    assert refusal is not None and "--attention-backend flash" in refusal
    torch_argv += ["--attention-backend", "auto"]
    refusal = megatron_refusal([*torch_argv, "--moe-permute-fusion"], resolved.world_size, recipe.cluster.env)
    assert refusal is not None and "torch-native backend cannot run" in refusal and "moe_permute_fusion" in refusal
    args = validate_on_cluster(torch_argv, resolved.world_size, recipe.cluster.env)
    assert args.transformer_impl == "local"


def test_an_attention_switch_the_recipe_exports_against_its_rows_is_refused_before_submission():
    """A recipe's ``[cluster.env]`` setting ``NVTE_FUSED_ATTN=0`` against a row of the default ``auto`` backend: the
    job would stop in megatron-core's assertion when it builds the model; refused with the row instead."""
    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    auto = [*resolved.argv, "--attention-backend", "auto"]
    env = {**recipe.cluster.env, "NVTE_FUSED_ATTN": "0"}
    refusal = megatron_refusal(auto, resolved.world_size, env)
    assert refusal is not None and refusal.startswith("AttentionEnvError: the environment sets NVTE_FUSED_ATTN='0'")
    assert megatron_refusal([*resolved.argv, "--attention-backend", "flash"], resolved.world_size, env) is None
    assert megatron_refusal(auto, resolved.world_size, recipe.cluster.env) is None


LOCAL = [path for path in RECIPES if not load_recipe(path).model.startswith("oellm-ckda-hybrid")]


@pytest.mark.parametrize("path", LOCAL, ids=[p.stem for p in LOCAL])
def test_local_fit_on_a_byte_corpus_passes_megatron_validate_args(path, monkeypatch, tmp_path):
    """What ``--local`` on one GPU hands the entry (real data, checkpoints), after the entry's own argv steps."""
    from megatron.oellm.recipes.local import fit_local
    from megatron.oellm.recipes.resolve import RunInputs
    from megatron.oellm.training.args import with_backend_implementation, with_training_defaults

    recipe = load_recipe(path)
    inputs = RunInputs((str(tmp_path / "corpus"),), "byte", str(tmp_path / "checkpoints"), save_interval=3)
    resolved = fit_local(recipe, recipe.row(1), 1, inputs)
    argv = with_backend_implementation(with_training_defaults(resolved.argv))
    args = validate_args_on_cluster(parse_oellm_argv(argv))
    assert (args.tokenizer_type, args.split, args.eval_interval) == ("NullTokenizer", "100,0,0", 1000)
    assert args.override_opt_param_scheduler and args.save == args.load


def test_two_data_sources_and_a_too_long_sequence_are_refused_as_the_entry_refuses_them(tmp_path):
    """The entry's checks made before megatron's validation apply to a row too: a ``--data-path`` added beside the
    row's mock data (megatron would train on mock data), and a sequence longer than the card's positions."""
    import random

    from megatron.oellm.cards import get_card

    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    assert "--mock-data" in resolved.argv
    refusal = megatron_refusal([*resolved.argv, "--data-path", str(tmp_path / "corpus")], resolved.world_size,
                               recipe.cluster.env)
    assert refusal is not None and "--mock-data and --data-path: give one data source" in refusal
    too_long = get_card(recipe.model).max_position_embeddings + random.randrange(1, 4096)
    refusal = megatron_refusal([*resolved.argv, "--seq-length", str(too_long)], resolved.world_size,
                               recipe.cluster.env)
    assert refusal is not None and f"--seq-length {too_long} exceeds model card" in refusal


def test_a_sequence_as_long_as_the_cards_positions_is_let_through():
    """megatron-core's ``validate_args`` asserts ``max_position_embeddings >= seq_length``: a row trained at the card's
    full context (262,144 positions for Qwen3.5-35B-A3B) is a valid job, not one to refuse."""
    from megatron.oellm.cards import get_card

    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    limit = get_card(recipe.model).max_position_embeddings
    assert megatron_refusal([*resolved.argv, "--seq-length", str(limit)], resolved.world_size,
                            recipe.cluster.env) is None


def _selective_recompute(argv: list[str], *modules: str) -> list[str]:
    """``argv`` with its recompute flags (and their values) replaced by selective recompute of ``modules``."""
    recompute = {"--recompute-granularity", "--recompute-method", "--recompute-num-layers"}
    kept = [token for index, token in enumerate(argv)
            if token not in recompute and (index == 0 or argv[index - 1] not in recompute)]
    return [*kept, "--recompute-granularity", "selective", "--recompute-modules", *modules]


def test_gdn_norm_out_of_a_qwen3_5_row_is_refused_before_submission():
    """megatron-core's config refuses gdn_norm_out for the HybridModel's GDN layers only once the job builds the model;
    ``--dry-run`` / ``--submit`` refuse it with the row, and the row's other modules still pass."""
    path = next(path for path in RECIPES if load_recipe(path).model.startswith("qwen3.5-"))
    recipe = load_recipe(path)
    resolved = resolve_row(recipe, recipe.rows[0])
    refusal = megatron_refusal(_selective_recompute(resolved.argv, "moe_act", "gdn_norm_out"), resolved.world_size,
                               recipe.cluster.env)
    assert refusal is not None and refusal.startswith(
        f"ValueError: --recompute-modules gdn_norm_out: model card {recipe.model} is a HybridModel"), refusal
    assert refusal.endswith("drop gdn_norm_out from --recompute-modules"), refusal
    assert megatron_refusal(_selective_recompute(resolved.argv, "moe_act"), resolved.world_size,
                            recipe.cluster.env) is None


@pytest.mark.parametrize("flags", [["--recompute-num-layers", "0"], ["--recompute-num-layers", "NEGATIVE"],
                                   ["--log-interval", "0"], ["--log-interval", "NEGATIVE"],
                                   ["--eval-interval", "0", "--eval-iters", "POSITIVE"]])
def test_an_interval_or_recompute_count_the_training_loop_divides_or_steps_by_is_refused_before_submission(flags):
    """validate_args passed these on an MN5 row (full uniform recompute of 1 layer, a log line every iteration); the
    job hung in its first forward pass (recompute stepping by 0 or -1 layers) or stopped at its first iteration or
    dataset build, after its wait in the queue. --dry-run and --submit refuse them as the training entry does."""
    import random

    path = next(path for path in RECIPES if "mn5" in path.stem and load_recipe(path).model.startswith("qwen3.5-"))
    recipe = load_recipe(path)
    resolved = resolve_row(recipe, recipe.rows[0])
    assert "--recompute-num-layers" in resolved.argv
    values = {"NEGATIVE": str(-random.randint(1, 40)), "POSITIVE": str(random.randint(1, 40))}
    flags = [values.get(token, token) for token in flags]
    refusal = megatron_refusal([*resolved.argv, *flags], resolved.world_size, recipe.row_env(recipe.rows[0]))
    assert refusal is not None and refusal.startswith(f"ValueError: {flags[0]} {flags[1]}: "), refusal


CONFIG_REFUSES = "ValueError: the model's TransformerConfig refuses the run's arguments: "


@pytest.mark.parametrize("stem, flag, message", [
    ("qwen3_5_35b_a3b_mn5_strong", "moe-pad-expert-input-to-capacity = true",
     CONFIG_REFUSES + "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity"),
    ("qwen3_5_35b_a3b_mn5_strong", "recompute-method = false",
     CONFIG_REFUSES + 'Using recompute_granularity: full so recompute_method must be "block" or "uniform"'),
    ("qwen3_235b_a22b_jupiter", "moe-router-enable-expert-bias = true",
     CONFIG_REFUSES + "Expert bias for aux-loss-free routing only supports 'sigmoid' and 'sqrtsoftplus' score "
                      "functions"),
    ("qwen3_5_35b_a3b_mn5_strong", "overlap-moe-expert-parallel-comm = true",
     "ValueError: --overlap-moe-expert-parallel-comm: qwen3.5-35b-a3b is a megatron-core HybridModel, which has no "
     "build_schedule_plan"),
    ("qwen3_5_35b_a3b_mn5_strong", "cpu-offloading-num-layers = 2",
     "ValueError: --cpu-offloading-num-layers 2: qwen3.5-35b-a3b is a megatron-core HybridModel, whose layer stack "
     "does not offload layers"),
    ("qwen3_30b_a3b_mn5", "multiple-validation-sets = true",
     "ValueError: --multiple-validation-sets: megatron-core 0.19.2 evaluates separate validation sets only with "
     "--full-validation"),
])
def test_a_setting_only_the_entrys_model_checks_refuse_is_refused_before_submission(tmp_path, capsys, stem, flag,
                                                                                   message):
    """megatron's validate_args passed these on a shipped row; the training entry refuses them once the job has
    started, after its wait in the queue: megatron-core's TransformerConfig (check_model_config) or, before it, the
    entry's check of the card's pipeline schedule. --dry-run (and --submit) refuse them with the row, in
    one error line, with the entry's message."""
    from megatron.oellm.cli import main

    config = tmp_path / "changed.toml"
    config.write_text(f'extends = "{RECIPES[0].parent / stem}.toml"\n[megatron_flags]\n{flag}\n')
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1, err
    assert f"oellm recipe: error: row 1: the training entry would stop the job at start: {message}" in err, err


def test_the_transformer_config_check_answers_as_the_cluster_image():
    """The config is built as the image builds it: an FP8 MoE row with megatron's default fused RoPE passes where
    Transformer Engine is missing (the config asks TE's version and RoPE kernel), and so does a setting the config
    accepts, a capacity factor beside the padding to capacity."""
    import random

    recipe = load_recipe(next(path for path in RECIPES if path.stem == "qwen3_235b_a22b_jupiter"))
    resolved = resolve_row(recipe, recipe.rows[0])
    assert "--fp8-format" in resolved.argv and "--no-rope-fusion" not in resolved.argv
    env = recipe.row_env(recipe.rows[0])
    assert megatron_refusal(resolved.argv, resolved.world_size, env) is None
    padded = [*resolved.argv, "--moe-pad-expert-input-to-capacity"]
    factor = f"{random.uniform(1.05, 2.0):.3f}"
    assert megatron_refusal([*padded, "--moe-expert-capacity-factor", factor], resolved.world_size, env) is None
    assert "moe_expert_capacity_factor must be set" in megatron_refusal(padded, resolved.world_size, env)


def test_a_kernel_name_the_installed_megatron_lacks_does_not_stop_the_check(monkeypatch):
    """A megatron-core release that renames one of the Transformer Engine kernels its config checks gives the row's
    verdict, not an ``AttributeError`` from the stand-in for the image's kernels."""
    from megatron.core.transformer.moe import moe_utils

    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    monkeypatch.delattr(moe_utils, "fused_sort_chunks_by_index_with_probs")
    assert megatron_refusal(resolved.argv, resolved.world_size, recipe.cluster.env) is None
    assert not hasattr(moe_utils, "fused_sort_chunks_by_index_with_probs")


def test_the_model_config_check_leaves_the_callers_arguments_unchanged():
    """:func:`check_model_config_on_cluster` pads the vocabulary as megatron would (it sets ``padded_vocab_size``
    when it builds the tokenizer, after its validation) on a copy: the caller's validated arguments keep megatron's
    unset ``padded_vocab_size``, so a later check reading them (the corpus's token ids) is not handed the stand-in
    for the tokenizer's vocabulary."""
    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    args = validate_on_cluster(resolved.argv, resolved.world_size, recipe.cluster.env)
    before = dict(vars(args))
    assert before.get("padded_vocab_size") is None
    check_model_config_on_cluster(args, resolved.world_size, recipe.cluster.env)
    assert vars(args) == before


def test_a_type_error_raised_inside_a_megatron_assert_is_named_by_that_assert():
    """``--attention-backend local`` without ``--spec``: megatron-core 0.19.2's ``assert args.spec[0] == 'local',
    ...`` raises a TypeError on the unset spec; the row's refusal names that statement, message included, not
    Python's ``'NoneType' object is not subscriptable``."""
    recipe = load_recipe(RECIPES[-1])
    resolved = resolve_row(recipe, recipe.rows[0])
    assert "--spec" not in resolved.argv
    assert megatron_refusal([*resolved.argv, "--attention-backend", "local"], resolved.world_size,
                            recipe.cluster.env) == ("TypeError: assert args.spec[0] == 'local' , '--attention-backend "
                                                    "local is only supported with --spec local'")
