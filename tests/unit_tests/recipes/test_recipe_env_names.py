"""Environment variable names of a recipe's ``env`` tables are checked when the recipe loads: a name that is no valid
environment variable name (``--local`` passed it to torchrun unchecked, where the SLURM job script refused it), and a
name of a variable the job script assigns itself (``MASTER_PORT``: the job script's value overwrote the recipe's
without a word), are refused before anything starts."""

from __future__ import annotations

import dataclasses
import random
import re
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES, fake_local_launch

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command
from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import JOB_SCRIPT_VARIABLES

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
BAD_NAMES = ("1BAD", "A-B", "A B", "", "A=B", "A\n")


def _config(tmp_path, table: str, name: str):
    """A copy of the Qwen3-30B-A3B MN5 recipe with ``name = "x"`` in its cluster's or its first row's env."""
    config = tmp_path / "env.toml"
    key = '"' + name.replace("\n", "\\n") + '"'
    if table == "cluster":
        config.write_text(f'extends = "{BASE}"\n[cluster.env]\n{key} = "x"\n')
    else:
        text = BASE.read_text().replace("extends = \"_mn5.toml\"", f'extends = "{EXAMPLES / "_mn5.toml"}"')
        config.write_text(text.replace('label = "HybridEP, forced balancing', f'env = {{ {key} = "x" }}\nlabel = '
                                       '"HybridEP, forced balancing', 1))
    return config


def _config_over_base(tmp_path: Path, text: str) -> Path:
    """A recipe config extending the shipped Qwen3-30B-A3B one with ``text`` over it."""
    path = tmp_path / "over_base.toml"
    path.write_text(f'extends = "{BASE}"\n{text}')
    return path


@pytest.mark.parametrize("table", ["cluster", "row"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_local_refuses_an_invalid_env_name_before_torchrun(tmp_path, monkeypatch, capsys, table, name):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    calls = []
    fake_local_launch(monkeypatch, lambda *a, **k: calls.append(a) or subprocess.CompletedProcess(a, 0))
    assert main(["recipe", str(_config(tmp_path, table, name)), "--local", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{name!r} is not a valid environment variable name" in err and not calls
    assert ("[cluster.env]" if table == "cluster" else "row 1: env") in err


@pytest.mark.parametrize("name", BAD_NAMES)
def test_dry_run_refuses_it_when_the_recipe_loads(tmp_path, capsys, name):
    assert main(["recipe", str(_config(tmp_path, "cluster", name)), "--dry-run", "--row", "1"]) == 2
    captured = capsys.readouterr()
    assert f"{name!r} is not a valid environment variable name" in captured.err and "== " not in captured.out


@pytest.mark.parametrize("name", ["_A1", "a", "NCCL_DEBUG"])
def test_a_valid_name_reaches_the_local_run(tmp_path, monkeypatch, name):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    envs = []

    class Done:
        returncode = 0

    fake_local_launch(monkeypatch, lambda command, env, check: envs.append(env) or Done())
    assert main(["recipe", str(_config(tmp_path, "row", name)), "--local", "--row", "1"]) == 0
    assert envs[0][name] == "x"


def test_cluster_env_master_port_is_refused_not_overwritten(tmp_path):
    port = random.Random(random.random()).randint(1024, 65535)
    with pytest.raises(RecipeError, match=r"\[cluster\.env\]: MASTER_PORT .*cluster\.master_port"):
        load_recipe(_config_over_base(tmp_path, f'[cluster.env]\nMASTER_PORT = "{port}"\n'))


@pytest.mark.parametrize("name", sorted(JOB_SCRIPT_VARIABLES))
def test_row_env_naming_a_job_script_variable_is_refused(tmp_path, name):
    text = ("[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"
            f'env = {{ {name} = "{random.Random(random.random()).randint(1, 10**6)}" }}\n')
    with pytest.raises(RecipeError, match=rf"row 1: env {name} is a variable the job script sets itself"):
        load_recipe(_config_over_base(tmp_path, text))


def test_every_refused_name_is_one_the_job_script_assigns(tmp_path):
    """With checkpoints and ``requeue = true``, which add the variables they need."""
    recipe = dataclasses.replace(load_recipe(BASE), requeue=True)
    directory = tmp_path / "run"
    inputs = RunInputs(checkpoint_dir=str(directory / "checkpoints"), save_interval=random.randint(1, 9),
                       time_limit_s=random.randint(600, 86400))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0], inputs), directory)
    assigned = set(re.findall(r"^([A-Z_]+)=", script, flags=re.MULTILINE))
    assert set(JOB_SCRIPT_VARIABLES) == assigned
