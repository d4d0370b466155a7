"""``--local`` caps its expert-parallel size by the selected row's EP (the row's ``parallel`` over the recipe's
``[parallel]``, as the SLURM run resolves it), not by the recipe's ``[parallel]`` EP alone."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.local import fit_local
from megatron.oellm.recipes.resolve import row_layout

BASE = EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"
GPUS = 8


def _recipe_with_row_ep(tmp_path: Path, row_ep: int) -> Path:
    """A recipe on :data:`BASE` (its ``[parallel]`` EP 16) whose second row sets ``parallel = { ep = row_ep }``."""
    path = tmp_path / "row_ep.toml"
    row = 'nodes = 64\nglobal_batch_size = 2048\nmicro_batch_size = 1\nlabel = "{}"\n'
    path.write_text(f'extends = "{BASE}"\ntitle = "row EP"\n\n[[rows]]\n{row.format("recipe EP")}\n'
                    f'[[rows]]\n{row.format("row EP")}parallel = {{ ep = {row_ep} }}\n')
    return path


def test_the_fit_takes_the_rows_ep_not_the_recipes(tmp_path):
    row_ep = random.choice([1, 2, 4])
    recipe = load_recipe(_recipe_with_row_ep(tmp_path, row_ep))
    assert recipe.parallel.ep > GPUS and row_layout(recipe, recipe.row(2)).ep == row_ep
    assert fit_local(recipe, recipe.row(2), GPUS).layout.ep == row_ep
    assert fit_local(recipe, recipe.row(1), GPUS).layout.ep == GPUS


def test_the_local_command_line_has_the_rows_ep(tmp_path, monkeypatch):
    row_ep = random.choice([2, 4])
    config = _recipe_with_row_ep(tmp_path, row_ep)
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: GPUS)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    commands = []
    monkeypatch.setattr(subprocess, "run",
                        lambda command, **k: commands.append(command) or subprocess.CompletedProcess(command, 0))
    assert main(["recipe", str(config), "--local", "--row", "2"]) == 0
    (command,) = commands
    assert command[command.index("--expert-model-parallel-size") + 1] == str(row_ep)
