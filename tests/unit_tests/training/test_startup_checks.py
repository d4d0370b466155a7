"""The training entry and ``oellm recipe``'s validation run one list of start-up checks
(:mod:`megatron.oellm.training.startup_checks`): a check added to a phase refuses a command line in both places."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.recipes.megatron_validation import megatron_refusal
from megatron.oellm.recipes.resolve import resolve_row
from megatron.oellm.recipes.toml_loading import load_recipe
from megatron.oellm.training import startup_checks
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain

RECIPE = Path(__file__).parents[3] / "examples/oellm/qwen3_30b_a3b_mn5.toml"
ENTRY_ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "128",
              "--micro-batch-size", "1", "--global-batch-size", "8", "--train-iters", "10"]


@pytest.mark.parametrize("phase", ["check_parsed_args", "check_validated_args", "check_model_args"])
def test_each_phase_runs_in_the_entry_and_in_the_recipe_validation(phase, monkeypatch, capsys):
    """A refusal planted in one phase stops both the entry (one ``error:`` line, exit 2) and a shipped recipe row."""
    reason = f"planted refusal {random.randrange(10**6)}"

    def refuse(*_args, **_kwargs):
        raise ValueError(reason)

    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(startup_checks, phase, refuse)
    assert entry.main(ENTRY_ARGV) == 2
    assert capsys.readouterr().err.splitlines() == [f"{entry.PROG}: error: {reason}"]

    recipe = load_recipe(RECIPE)
    resolved = resolve_row(recipe, recipe.rows[0])
    assert megatron_refusal(resolved.argv, resolved.world_size, recipe.cluster.env) == f"ValueError: {reason}"


def test_a_recipe_row_with_yaml_cfg_is_refused_as_the_entry_refuses_it(tmp_path, capsys):
    """``--yaml-cfg`` (megatron replaces every command-line argument by the file's) passed ``--dry-run`` while the
    entry refused it at the job's start; the parsed-arguments phase is now the recipe's too."""
    from megatron.oellm.cli import main

    yaml = tmp_path / "run.yaml"
    yaml.write_text(f"lr: {random.uniform(1e-5, 1e-3)}\n")
    config = tmp_path / "yaml_row.toml"
    config.write_text(f'extends = "{RECIPE}"\n[megatron_flags]\nyaml-cfg = "{yaml}"\n')
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1, err
    assert "row 1: the training entry would stop the job at start: ValueError: --yaml-cfg: " in err, err


def test_layer_offloading_on_a_hybrid_card_is_refused_by_the_model_phase(monkeypatch, capsys):
    """megatron-core's HybridStack never offloads layers: ``--cpu-offloading-num-layers`` on a Qwen3.5 card would
    change nothing, without a word. The model-argument phase refuses it (one ``error:`` line), naming the flag."""
    entry = entry_up_to_pretrain(monkeypatch)
    layers = random.randint(1, 3)
    argv = [*ENTRY_ARGV[:1], "qwen3.5-35b-a3b-tiny", *ENTRY_ARGV[2:], "--cpu-offloading-num-layers", str(layers)]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --cpu-offloading-num-layers {layers}: ") and "HybridModel" in line


@pytest.mark.parametrize("own_eval_micro", [False, True])
def test_a_refusal_of_evaluation_sizes_of_their_own_is_left_as_megatron_words_it(own_eval_micro: bool) -> None:
    """megatron-core words an off-grid training batch as its evaluation batch, which defaults to the training one:
    said of the training batch (its flags, the nearest multiple) where the evaluation sizes are the defaults, and
    left as megatron words it where the command line gives an ``--eval-micro-batch-size`` of its own (the refusal
    is then of that flag, and the training batch may well be on its grid)."""
    import argparse

    micro, data_parallel = random.randint(1, 8), random.randint(2, 8)
    batch = micro * data_parallel * random.randint(1, 50) + random.randint(1, micro * data_parallel - 1)
    eval_micro = micro + random.randint(1, 8) if own_eval_micro else random.choice([None, micro])
    detail = (f"eval_global_batch_size ({batch}) must be divisible by eval_micro_batch_size ({eval_micro or micro}) "
              f"* data_parallel_size ({data_parallel})")
    parsed = argparse.Namespace(decrease_batch_size_if_needed=False, global_batch_size=batch, micro_batch_size=micro,
                                eval_global_batch_size=random.choice([None, batch]), eval_micro_batch_size=eval_micro)
    said = startup_checks.training_batch_detail(detail, parsed)
    if own_eval_micro:
        assert said == detail
    else:
        assert said.startswith(f"--global-batch-size {batch} is not a multiple of --micro-batch-size {micro} x "
                               f"data-parallel size {data_parallel}"), said
