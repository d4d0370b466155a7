"""Review 25: recipe input that was silently lost or crashed ``oellm recipe`` with a traceback.

An ``env`` entry named like a variable the job script assigns itself (``MASTER_PORT``), a ``save-interval`` without
``save`` (megatron-core then saves nothing), and a list flag value argparse would read as an option.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import JOB_SCRIPT_VARIABLES

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"


def _config(tmp_path: Path, text: str) -> Path:
    """A recipe config extending the shipped Qwen3-30B-A3B one with ``text`` over it."""
    path = tmp_path / "review25.toml"
    path.write_text(f'extends = "{BASE}"\n{text}')
    return path


def test_cluster_env_master_port_is_refused_not_overwritten(tmp_path):
    port = random.Random().randint(1024, 65535)
    with pytest.raises(RecipeError, match=r"\[cluster\.env\]: MASTER_PORT .*cluster\.master_port"):
        load_recipe(_config(tmp_path, f'[cluster.env]\nMASTER_PORT = "{port}"\n'))


@pytest.mark.parametrize("name", sorted(JOB_SCRIPT_VARIABLES))
def test_row_env_naming_a_job_script_variable_is_refused(tmp_path, name):
    text = ("[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"
            f'env = {{ {name} = "{random.Random().randint(1, 10**6)}" }}\n')
    with pytest.raises(RecipeError, match=rf"row 1: env {name} is a variable the job script sets itself"):
        load_recipe(_config(tmp_path, text))


def test_every_refused_name_is_one_the_job_script_assigns(tmp_path):
    recipe = load_recipe(BASE)
    directory = tmp_path / "run"
    inputs = RunInputs(checkpoint_dir=str(directory / "checkpoints"), save_interval=random.Random().randint(1, 9))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0], inputs), directory)
    assigned = set(re.findall(r"^([A-Z_]+)=", script, flags=re.MULTILINE))
    assert set(JOB_SCRIPT_VARIABLES) == assigned


def test_recipe_save_interval_without_save_is_refused(tmp_path):
    interval = random.Random().randint(1, 1000)
    recipe = load_recipe(_config(tmp_path, f"[megatron_flags]\nsave-interval = {interval}\n"))
    with pytest.raises(RecipeError, match=rf"--save-interval {interval} saves nothing without --save"):
        resolve_row(recipe, recipe.rows[0])


def test_row_persistent_save_interval_without_save_is_refused(tmp_path):
    interval = random.Random().randint(1, 1000)
    text = ("[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"
            f"flags = {{ persistent-save-interval = {interval} }}\n")
    recipe = load_recipe(_config(tmp_path, text))
    with pytest.raises(RecipeError, match="saves nothing without --save"):
        resolve_row(recipe, recipe.rows[0])


def test_recipe_save_interval_with_save_reaches_megatron(tmp_path):
    interval = random.Random().randint(1, 1000)
    save = tmp_path / "ckpt"
    recipe = load_recipe(_config(tmp_path, f'[megatron_flags]\nsave-interval = {interval}\nsave = "{save}"\n'))
    argv = resolve_row(recipe, recipe.rows[0]).argv
    assert argv[argv.index("--save-interval") + 1] == str(interval)
    assert argv[argv.index("--save") + 1] == str(save)


def test_command_line_save_interval_still_sets_save(tmp_path):
    interval = random.Random().randint(1, 1000)
    recipe = load_recipe(BASE)
    argv = resolve_row(recipe, recipe.rows[0], RunInputs(checkpoint_dir=str(tmp_path), save_interval=interval)).argv
    assert argv[-6:] == ["--save", str(tmp_path), "--load", str(tmp_path), "--save-interval", str(interval)]


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


def test_a_layer_spec_the_model_provider_ignores_is_refused_before_the_job_is_queued(tmp_path, capsys):
    """The training entry refuses ``--spec MODULE FUNCTION`` at start (the card family's spec builder reads none);
    ``--dry-run`` now says so before the job waits in the queue."""
    config = _config(tmp_path, '[megatron_flags]\nspec = ["megatron.core.models.gpt.gpt_layer_specs", '
                               '"get_gpt_layer_local_spec"]\n')
    assert main(["recipe", str(config), "--row", "1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--spec megatron.core.models.gpt.gpt_layer_specs get_gpt_layer_local_spec: the model is built by" in err
