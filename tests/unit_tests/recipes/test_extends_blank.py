"""``extends`` of spaces or tabs only is refused as empty, naming the value: resolved, it named the config's own
folder, refused as a folder (mutation audit of the ``extends`` check, which strips the value)."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.recipes import RecipeError, load_recipe


def test_an_extends_of_whitespace_is_empty(tmp_path):
    blank = "".join(random.choice(" \t") for _ in range(random.randint(1, 6)))
    config = tmp_path / f"blank{random.randrange(1000)}.toml"
    config.write_text(f'extends = "{blank}"\ntitle = "t"\n')
    with pytest.raises(RecipeError) as refusal:
        load_recipe(config)
    assert str(refusal.value) == (f"{config}: extends = {blank!r} is empty; give the base config's path, absolute or "
                                  "relative to the folder of this config's real file (a symbolic link's target), or "
                                  "drop the key")
