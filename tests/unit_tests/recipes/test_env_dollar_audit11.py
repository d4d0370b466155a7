"""A ``$`` anywhere in a recipe's environment value is refused, not only at its start (audit 11): the job script and
``--local`` export values as written, so ``"/scratch/$USER/triton"`` reached the program as that literal text."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import RecipeError, load_recipe


def _config(tmp_path, cluster_env: str, row_env: str):
    config = tmp_path / "env.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "env"\n{cluster_env}'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n'
                      f'[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n{row_env}')
    return config


@pytest.mark.parametrize("where", ["cluster", "row"])
def test_a_variable_inside_an_environment_value_is_refused_naming_the_key(where, tmp_path):
    """``/scratch/$USER/cache`` (the variable in the middle of a path) is refused like ``$TMPDIR/cache``, naming
    the key and the value as written."""
    key = f"OELLM_AUDIT_{random.randint(0, 999)}"
    value = random.choice(["/scratch/$USER/triton", "/p/${PROJECT}/cache", f"run-{random.randint(0, 99)}-$SLURM_JOB_ID"])
    cluster_env = f'[cluster.env]\n{key} = "{value}"\n' if where == "cluster" else ""
    row_env = f'env = {{ {key} = "{value}" }}\n' if where == "row" else ""
    prefix = "[cluster.env]: " if where == "cluster" else "row 2 env: "
    with pytest.raises(RecipeError) as refusal:
        load_recipe(_config(tmp_path, cluster_env, row_env))
    assert f"{prefix}{key} = {value!r}: the job exports values as written, without shell expansion" in \
        str(refusal.value)


def test_a_value_without_a_dollar_passes(tmp_path):
    key = f"OELLM_AUDIT_{random.randint(0, 999)}"
    value = f"/scratch/user{random.randint(0, 99)}/triton"
    recipe = load_recipe(_config(tmp_path, f'[cluster.env]\n{key} = "{value}"\n', ""))
    assert recipe.cluster.env[key] == value
