"""``--local``'s expert-parallel size: always valid for the GPUs and experts, capped by the selected row's EP (the
row's ``parallel`` over the recipe's ``[parallel]``, as the SLURM run resolves it), not by the recipe's ``[parallel]``
EP alone; and a row's EP communication overlap, which megatron-core's ``TransformerConfig`` refuses at EP 1 (on every
rank, after torchrun started), is dropped with a ``note:`` when the fit comes down to EP 1."""

from __future__ import annotations

import dataclasses
import random
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES, fake_local_launch

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.local import fit_local, local_expert_parallel
from megatron.oellm.recipes.resolve import row_layout

JUPITER = EXAMPLES / "qwen3_235b_a22b_jupiter.toml"
OVERLAP_ROW = 2
"""The Megatron-MoE-ModelZoo row: EP all-to-all overlap with delayed wgrad."""
BASE = EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"
GPUS = 8


def _recipe_with_row_ep(tmp_path: Path, row_ep: int) -> Path:
    """A recipe on :data:`BASE` (its ``[parallel]`` EP 16) whose second row sets ``parallel = { ep = row_ep }``."""
    path = tmp_path / "row_ep.toml"
    row = 'nodes = 64\nglobal_batch_size = 2048\nmicro_batch_size = 1\nlabel = "{}"\n'
    path.write_text(f'extends = "{BASE}"\ntitle = "row EP"\n\n[[rows]]\n{row.format("recipe EP")}\n'
                    f'[[rows]]\n{row.format("row EP")}parallel = {{ ep = {row_ep} }}\n')
    return path


def test_the_fitted_ep_divides_the_gpus_and_the_experts_and_is_the_largest_such():
    recipe = load_recipe(JUPITER)
    card = fit_local(recipe, recipe.rows[0], 1).card
    rng = random.Random(random.random())
    for _ in range(200):
        gpus, experts, recipe_ep = rng.randint(1, 16), rng.randint(1, 160), rng.randint(1, 64)
        ep = local_expert_parallel(dataclasses.replace(card, num_experts=experts, moe_router_topk=1), gpus, recipe_ep)
        assert gpus % ep == 0 and experts % ep == 0 and ep <= recipe_ep
        assert not any(gpus % d == 0 and experts % d == 0 for d in range(ep + 1, min(gpus, recipe_ep) + 1))


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
    fake_local_launch(monkeypatch,
                      lambda command, **k: commands.append(command) or subprocess.CompletedProcess(command, 0))
    assert main(["recipe", str(config), "--local", "--row", "2"]) == 0
    (command,) = commands
    assert command[command.index("--expert-model-parallel-size") + 1] == str(row_ep)


@pytest.mark.parametrize("gpus", [1, 3])
def test_an_ep1_fit_drops_the_ep_overlap_and_what_needs_it_with_notes(gpus):
    recipe = load_recipe(JUPITER)
    row = recipe.row(OVERLAP_ROW)
    assert row.flags["overlap-moe-expert-parallel-comm"] and row.flags["delay-wgrad-compute"]
    resolved = fit_local(recipe, row, gpus)
    assert resolved.layout.ep == 1
    assert "--overlap-moe-expert-parallel-comm" not in resolved.argv and "--delay-wgrad-compute" not in resolved.argv
    notes = "\n".join(resolved.notes)
    assert ("--local runs without --overlap-moe-expert-parallel-comm here (the row: "
            "--overlap-moe-expert-parallel-comm)") in notes and f"EP 1 on {gpus} GPU(s)" in notes
    assert "--local runs without --delay-wgrad-compute here (the row: --delay-wgrad-compute)" in notes


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_a_fit_with_expert_parallelism_keeps_the_overlap(gpus):
    recipe = load_recipe(JUPITER)
    resolved = fit_local(recipe, recipe.row(OVERLAP_ROW), gpus)
    assert resolved.layout.ep == gpus
    assert "--overlap-moe-expert-parallel-comm" in resolved.argv and "--delay-wgrad-compute" in resolved.argv
    assert not any("overlap" in note or "wgrad" in note for note in resolved.notes)


def test_the_one_gpu_run_prints_the_notes_and_starts_without_the_overlap(monkeypatch, capsys):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    commands = []
    fake_local_launch(monkeypatch,
                      lambda command, **k: commands.append(command) or subprocess.CompletedProcess(command, 0))
    assert main(["recipe", str(JUPITER), "--local", "--row", str(OVERLAP_ROW)]) == 0
    (command,) = commands
    assert command[command.index("--expert-model-parallel-size") + 1] == "1"
    assert "--overlap-moe-expert-parallel-comm" not in command and "--delay-wgrad-compute" not in command
    out = capsys.readouterr().out
    assert "note: --local runs without --overlap-moe-expert-parallel-comm here" in out
