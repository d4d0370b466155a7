"""The checkpoint flags a row resolves to: a ``save-interval`` (or ``persistent-save-interval``) without ``save`` is
refused (megatron-core then saves nothing), a negative one is refused even with a checkpoint directory, a recipe's
``save`` reaches Megatron, and ``oellm recipe --save-interval`` brings its own ``save``/``load`` folders wherever the
recipe leaves them unset (``false`` included). Fresh random intervals."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row
from megatron.oellm.recipes.resolve import checkpoint_flags, with_own_checkpoint_paths

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"


def _config(tmp_path: Path, text: str) -> Path:
    """A recipe config extending the shipped Qwen3-30B-A3B one with ``text`` over it."""
    path = tmp_path / "checkpoints.toml"
    path.write_text(f'extends = "{BASE}"\n{text}')
    return path


def test_recipe_save_interval_without_save_is_refused(tmp_path):
    interval = random.Random(random.random()).randint(1, 1000)
    recipe = load_recipe(_config(tmp_path, f"[megatron_flags]\nsave-interval = {interval}\n"))
    with pytest.raises(RecipeError, match=rf"--save-interval {interval} saves nothing without --save"):
        resolve_row(recipe, recipe.rows[0])


def test_row_persistent_save_interval_without_save_is_refused(tmp_path):
    interval = random.Random(random.random()).randint(1, 1000)
    text = ("[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"
            f"flags = {{ persistent-save-interval = {interval} }}\n")
    recipe = load_recipe(_config(tmp_path, text))
    with pytest.raises(RecipeError, match="saves nothing without --save"):
        resolve_row(recipe, recipe.rows[0])


def test_recipe_save_interval_with_save_reaches_megatron(tmp_path):
    interval = random.Random(random.random()).randint(1, 1000)
    save = tmp_path / "ckpt"
    recipe = load_recipe(_config(tmp_path, f'[megatron_flags]\nsave-interval = {interval}\nsave = "{save}"\n'))
    argv = resolve_row(recipe, recipe.rows[0]).argv
    assert argv[argv.index("--save-interval") + 1] == str(interval)
    assert argv[argv.index("--save") + 1] == str(save)


def test_command_line_save_interval_still_sets_save(tmp_path):
    interval = random.Random(random.random()).randint(1, 1000)
    recipe = load_recipe(BASE)
    argv = resolve_row(recipe, recipe.rows[0], RunInputs(checkpoint_dir=str(tmp_path), save_interval=interval)).argv
    assert argv[-6:] == ["--save", str(tmp_path), "--load", str(tmp_path), "--save-interval", str(interval)]


@pytest.mark.parametrize("interval", [-1, -random.randint(2, 1000)])
def test_a_negative_save_interval_is_refused_even_with_a_checkpoint_directory(interval, tmp_path):
    """A submitted or ``--local`` row has its checkpoint directory: ``--save-interval -1`` must not reach megatron."""
    with pytest.raises(RecipeError, match=rf"--save-interval must be >= 0 \(0: no checkpoints\), got {interval}"):
        checkpoint_flags(RunInputs(checkpoint_dir=str(tmp_path), save_interval=interval))
    assert checkpoint_flags(RunInputs(checkpoint_dir=str(tmp_path), save_interval=0)) == {}


def test_a_save_or_load_the_recipe_removed_gets_the_checkpoint_directory(tmp_path):
    """``false`` leaves a flag unset, as None does: ``--save-interval`` then brings its own save and load folders,
    while a folder the recipe sets is kept."""
    interval = random.randint(1, 1000)
    checkpoint = checkpoint_flags(RunInputs(checkpoint_dir=str(tmp_path), save_interval=interval))
    assert with_own_checkpoint_paths(checkpoint, {"save": False, "load": None}) == checkpoint
    assert with_own_checkpoint_paths(checkpoint, {"save": False, "load": "/converted"}) == {
        "save": str(tmp_path), "save-interval": interval}
