"""A row's ``flags = { sequence-parallel = false }`` (``false`` removes a flag) was refused as "--sequence-parallel
False ... contradicts": the refusal now says that removing the flag contradicts the setting that owns it."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row


def test_removing_an_owned_flag_is_named_as_removing_it(tmp_path):
    config = tmp_path / f"sweep{random.randrange(10**6)}.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"}"\ntitle = "t"\n[[rows]]\nnodes = 64\n'
                      "global_batch_size = 2048\nmicro_batch_size = 1\nflags = { sequence-parallel = false }\n")
    recipe = load_recipe(config)
    with pytest.raises(RecipeError) as caught:
        resolve_row(recipe, recipe.rows[0])
    message = str(caught.value)
    assert message.startswith("removing --sequence-parallel (sequence-parallel = false) in "), message
    assert "which sets it to True" in message and "False" not in message.split("which")[0]
