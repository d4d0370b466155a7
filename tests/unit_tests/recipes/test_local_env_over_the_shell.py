"""``--local`` checks a row's setup on this machine before it is submitted, so the row's exports win over the same
names in the user's shell (a site profile's ``NCCL_*``, ``CUDA_DEVICE_MAX_CONNECTIONS``, allocator settings): else the
check would run another setup than the job. Variables the recipe does not name pass through from the shell."""

from __future__ import annotations

import random
import string

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.local import local_environment

RECIPES = ["qwen3_235b_a22b_jupiter.toml", "qwen3_5_35b_a3b_mn5_strong.toml", "qwen3_30b_a3b_mn5.toml"]


@pytest.mark.parametrize("name", RECIPES)
def test_the_rows_exports_win_over_the_shell(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe(EXAMPLES / name)
    row = random.choice(recipe.rows)
    exports = recipe.row_env(row)
    assert exports, f"{name}: a row without exports tests nothing here"
    for variable in exports:
        monkeypatch.setenv(variable, f"shell-{random.randrange(10**6)}")
    unrelated = "OELLM_TEST_" + "".join(random.choices(string.ascii_uppercase, k=8))
    monkeypatch.setenv(unrelated, "from the shell")
    environment = local_environment(recipe, row)
    assert {variable: environment[variable] for variable in exports} == {k: str(v) for k, v in exports.items()}
    assert environment[unrelated] == "from the shell"
