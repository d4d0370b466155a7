"""A row's ``train-samples`` beside the ``--train-iters`` the row's ``train_iters`` sets got through the recipe and
ended in megatron's bare "AssertionError: expected iteration-based training": the recipe now refuses it, saying
that the run's length is the row's ``train_iters``."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row


@pytest.mark.parametrize("where", ["row", "recipe"])
def test_train_samples_beside_the_rows_train_iters_is_refused_naming_train_iters(tmp_path, where):
    samples = random.randrange(1, 10**7)
    recipe_flags = f"[megatron_flags]\ntrain-samples = {samples}\n" if where == "recipe" else ""
    row_flags = f"flags = {{ train-samples = {samples} }}\n" if where == "row" else ""
    config = tmp_path / f"samples{random.randrange(10**6)}.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"}"\ntitle = "t"\n{recipe_flags}'
                      f"[[rows]]\nnodes = 64\nglobal_batch_size = 2048\nmicro_batch_size = 1\n{row_flags}")
    recipe = load_recipe(config)
    with pytest.raises(RecipeError) as caught:
        resolve_row(recipe, recipe.rows[0])
    message = str(caught.value)
    assert message.startswith(f"--train-samples {samples} in "), message
    assert "the row's train_iters" in message and "refuses --train-samples" in message, message
    assert message.endswith("; remove it, and give the row's train_iters instead"), message
