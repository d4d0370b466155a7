"""Rows -> argv: a row's value reaches Megatron as the recipe means it, whatever spelling or form it has (one setting
under two flag spellings, a ``no-`` spelling, a list flag as one spaced string, a boolean flag with a value, a list
value argparse would read as an option), and a ``--spec`` the model provider would ignore is refused, not dropped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row
from megatron.oellm.recipes.resolve import RunInputs

BASE = EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"
QWEN3_30B = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n"


def _recipe(tmp_path, flags: str = "", row_flags: str = "", base_flags: str = ""):
    """A recipe on the Qwen3.5 MN5 base (optionally through a middle base with ``base_flags``) with one 8-node row;
    ``flags`` are its [megatron_flags] lines, ``row_flags`` its row's inline flags."""
    base = BASE
    if base_flags:
        base = tmp_path / "middle.toml"
        base.write_text(f'extends = "{BASE}"\n[megatron_flags]\n{base_flags}\n')
    config = tmp_path / "recipe.toml"
    config.write_text(f'extends = "{base}"\ntitle = "flag forms"\n[megatron_flags]\n{flags}\n'
                      f'{ROW}flags = {{ {row_flags} }}\n')
    recipe = load_recipe(config)
    return recipe, recipe.rows[0]


def _config(tmp_path: Path, text: str) -> Path:
    """A recipe config extending the shipped Qwen3-30B-A3B one with ``text`` over it."""
    path = tmp_path / "qwen3_30b.toml"
    path.write_text(f'extends = "{QWEN3_30B}"\n{text}')
    return path


def test_a_row_override_under_another_spelling_of_a_setting_wins(tmp_path, parse_megatron):
    """--save-interval and --persistent-save-interval are one setting: a base sets one spelling, the recipe the
    other, the row the first again. The row's value must be the one Megatron reads (argparse's last wins), not the
    recipe's, which a dict update left behind the row's in the argv."""
    base_value, recipe_value, row_value = random.sample(range(10, 10_000), 3)
    # a save directory beside the interval: without one megatron saves nothing, and the recipe is refused
    recipe, row = _recipe(tmp_path, base_flags=f'save-interval = {base_value}\nsave = "{tmp_path / "ckpt"}"',
                          flags=f"persistent-save-interval = {recipe_value}",
                          row_flags=f"save-interval = {row_value}")
    assert parse_megatron(resolve_row(recipe, row).argv).save_interval == row_value


def test_the_command_lines_save_interval_wins_over_a_recipes_other_spelling(tmp_path, parse_megatron):
    """``oellm recipe --save-interval N`` is the last group: it must beat a row's --persistent-save-interval even when
    the recipe set --save-interval before (the dict kept that key's early place in the argv)."""
    recipe_value, row_value, command_line = random.sample(range(10, 10_000), 3)
    recipe, row = _recipe(tmp_path, flags=f"save-interval = {recipe_value}",
                          row_flags=f"persistent-save-interval = {row_value}")
    inputs = RunInputs(checkpoint_dir=str(tmp_path / "ckpt"), save_interval=command_line)
    assert parse_megatron(resolve_row(recipe, row, inputs).argv).save_interval == command_line


def test_a_row_turning_a_setting_off_under_its_store_false_spelling_wins(tmp_path, parse_megatron):
    """--yarn-correction-range-round-to-int / --no-yarn-correction-range-round-to-int set one destination."""
    recipe, row = _recipe(tmp_path, base_flags="no-yarn-correction-range-round-to-int = true",
                          flags="yarn-correction-range-round-to-int = true",
                          row_flags='"no-yarn-correction-range-round-to-int" = true')
    assert parse_megatron(resolve_row(recipe, row).argv).yarn_correction_range_round_to_int is False


@pytest.mark.parametrize("flag", ["recompute-modules", "cuda-graph-modules", "offload-modules"])
def test_a_list_flag_written_as_one_spaced_string_is_refused(tmp_path, flag):
    """``recompute-modules = "moe_act layernorm"`` (the report's YAML spelling) is one argv token: Megatron reads the
    one module 'moe_act layernorm', which its parser and validate_args accept and TransformerConfig refuses at job
    start. The recipe must say so at load, naming its file and the TOML array."""
    words = random.sample(["moe_act", "layernorm", "core_attn", "mlp", "moe", "attn"], 2)
    with pytest.raises(RecipeError, match=rf"recipe\.toml: --{flag} .* one value.*\[\"{words[0]}\", \"{words[1]}\"\]"):
        _recipe(tmp_path, row_flags=f'{flag} = "{" ".join(words)}"')


def test_a_list_flag_as_an_array_or_a_single_word_resolves(tmp_path, parse_megatron):
    recipe, row = _recipe(tmp_path, flags='recompute-granularity = "selective"\nrecompute-method = false\n'
                                          'recompute-num-layers = false',
                          row_flags='recompute-modules = ["moe_act", "layernorm"], offload-modules = "attn_norm"')
    args = parse_megatron(resolve_row(recipe, row).argv)
    assert args.recompute_modules == ["moe_act", "layernorm"] and args.offload_modules == ["attn_norm"]


@pytest.mark.parametrize("row_flags, message", [
    ("bf16 = 1", r"--bf16 takes no value.*bf16 = true"),
    ('moe-router-force-load-balancing = "false"', r"--moe-router-force-load-balancing takes no value"),
    ("seed = true", r"--seed takes a value"),
    ("spec = true", r"--spec takes a value"),
])
def test_a_boolean_flag_with_a_value_or_a_valued_flag_as_true_is_refused(tmp_path, row_flags, message):
    """``--bf16 1`` stops the parser; a bare --spec (nargs '*') silently parses as an empty list. Refused at load,
    naming the recipe's file."""
    with pytest.raises(RecipeError, match=rf"recipe\.toml: {message}"):
        _recipe(tmp_path, row_flags=row_flags)


@pytest.mark.parametrize("table", ["[megatron_flags]\nrecompute-modules = [\"-inf\"]\n",
                                   "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"
                                   "flags = { recompute-modules = [\"moe_act\", \"-x\"] }\n"])
def test_list_value_argparse_reads_as_an_option_is_an_error_line_not_a_traceback(tmp_path, monkeypatch, capsys,
                                                                                  table):
    monkeypatch.chdir(tmp_path)
    assert main(["recipe", str(_config(tmp_path, table)), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm recipe: error: row 1: --recompute-modules: list values")
    assert "cannot be written as separate argv tokens" in err


@pytest.mark.parametrize("value", ['[["{module}"]]', '["{module}", ["{module}"]]', '[{{ name = "{module}" }}]',
                                   '["{module}", true]', '[1979-05-27]'],
                         ids=["nested", "nested-beside-a-string", "table", "boolean", "date"])
def test_a_list_value_that_is_no_number_or_string_is_an_error_line_naming_the_flag(tmp_path, monkeypatch, capsys,
                                                                                   value):
    """``recompute-modules = [["moe_act"]]`` reached Megatron as the one module ``['moe_act']``: --dry-run and
    --submit passed it, and the job stopped at start, after its wait in the queue."""
    monkeypatch.chdir(tmp_path)
    module = random.choice(["moe_act", "layernorm", "mlp", "core_attn"])
    table = ("[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"
             f"flags = {{ recompute-modules = {value.format(module=module)} }}\n")
    assert main(["recipe", str(_config(tmp_path, table)), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("oellm recipe: error: row 1: --recompute-modules: list values "), err
    assert "are not numbers or strings" in err and "(in the row's flags)" in err


def test_a_layer_spec_the_model_provider_ignores_is_refused_before_the_job_is_queued(tmp_path, capsys):
    """The training entry refuses ``--spec MODULE FUNCTION`` at start (the card family's spec builder reads none);
    ``--dry-run`` now says so before the job waits in the queue."""
    config = _config(tmp_path, '[megatron_flags]\nspec = ["megatron.core.models.gpt.gpt_layer_specs", '
                               '"get_gpt_layer_local_spec"]\n')
    assert main(["recipe", str(config), "--row", "1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--spec megatron.core.models.gpt.gpt_layer_specs get_gpt_layer_local_spec: the model is built by" in err
