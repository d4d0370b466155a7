"""A job that saves checkpoints stops and saves before its SLURM time limit (megatron's ``--exit-duration-in-mins``)
instead of being killed at it with every iteration since its last periodic save lost; benchmark rows (no
checkpoints), ``--local`` runs (no limit) and a recipe's own setting are left as they are."""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RunInputs, load_recipe, resolve_row
from megatron.oellm.recipes.resolve import SAVE_MARGIN_FRACTION, SAVE_MARGIN_S, exit_duration_minutes

RECIPE = EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"


def _exit_flags(capsys, *options: str) -> list[str]:
    """The ``--exit-duration-in-mins`` lines of the dry run of row 2 of the strong-scaling recipe."""
    assert main(["recipe", str(RECIPE), "--dry-run", "--row", "2", *options]) == 0
    return [line.strip() for line in capsys.readouterr().out.splitlines() if "--exit-duration-in-mins" in line]


def test_the_exit_leaves_the_margin_before_the_limit():
    for limit in (random.randrange(600, 7200), random.randrange(7200, 4 * 86400)):
        minutes = exit_duration_minutes(limit)
        margin = max(SAVE_MARGIN_S, SAVE_MARGIN_FRACTION * limit)
        assert minutes is not None and limit - margin - 60 < minutes * 60 <= limit - margin
    assert exit_duration_minutes(SAVE_MARGIN_S + random.randrange(0, 60)) is None


def test_a_checkpointing_job_exits_before_its_time_limit(capsys):
    hours, minutes = random.randrange(1, 48), random.randrange(60)
    limit = hours * 3600 + minutes * 60
    lines = _exit_flags(capsys, "--save-interval", str(random.randrange(1, 100)), "--time", f"{hours}:{minutes:02d}:00")
    assert lines == [f"--exit-duration-in-mins {exit_duration_minutes(limit)}"]


def test_a_benchmark_row_gets_no_exit(capsys):
    assert _exit_flags(capsys) == []


def test_a_recipes_own_exit_stands(tmp_path, capsys):
    own = random.randrange(1, 20)
    config = tmp_path / "own_exit.toml"
    config.write_text(f'extends = "{RECIPE}"\n[megatron_flags]\nexit-duration-in-mins = {own}\n')
    assert main(["recipe", str(config), "--dry-run", "--row", "2", "--save-interval", "5"]) == 0
    out = capsys.readouterr().out
    assert [line.strip() for line in out.splitlines() if "--exit-duration-in-mins" in line] == [
        f"--exit-duration-in-mins {own}"]


def test_a_run_without_a_time_limit_gets_no_exit(tmp_path):
    """``--local`` resolves its rows without a time limit."""
    recipe = load_recipe(RECIPE)
    inputs = RunInputs(save_interval=random.randrange(1, 100), checkpoint_dir=str(tmp_path))
    flags = resolve_row(recipe, recipe.rows[1], inputs).flags
    assert flags["save-interval"] == inputs.save_interval and "exit-duration-in-mins" not in flags
