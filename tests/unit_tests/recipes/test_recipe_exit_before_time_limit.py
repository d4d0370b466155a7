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
    """Row 2 expects 23 min under its 30-minute limit: an own stop after it stands; one before it is refused.

    Its stop must also leave more than one 75-s step before the limit, so 29 min is not drawn (refused elsewhere).
    """
    own = random.randrange(24, 29)
    config = tmp_path / "own_exit.toml"
    config.write_text(f'extends = "{RECIPE}"\n[megatron_flags]\nexit-duration-in-mins = {own}\n')
    assert main(["recipe", str(config), "--dry-run", "--row", "2", "--save-interval", "5"]) == 0
    out = capsys.readouterr().out
    assert [line.strip() for line in out.splitlines() if "--exit-duration-in-mins" in line] == [
        f"--exit-duration-in-mins {own}"]
    early = random.randrange(1, 23)
    config.write_text(f'extends = "{RECIPE}"\n[megatron_flags]\nexit-duration-in-mins = {early}\n')
    assert main(["recipe", str(config), "--dry-run", "--row", "2", "--save-interval", "5"]) == 2
    err = capsys.readouterr().err
    assert "set a later exit-duration-in-mins in the recipe, or none" in err
    assert f"(--exit-duration-in-mins {early}: it exits and saves after {early} min)" in err
    assert main(["recipe", str(config), "--dry-run", "--row", "2"]) == 2  # no checkpoints: it saves nothing
    assert f"(--exit-duration-in-mins {early}: it exits after {early} min)" in capsys.readouterr().err


def test_a_run_without_a_time_limit_gets_no_exit(tmp_path):
    """``--local`` resolves its rows without a time limit."""
    recipe = load_recipe(RECIPE)
    inputs = RunInputs(save_interval=random.randrange(1, 100), checkpoint_dir=str(tmp_path))
    flags = resolve_row(recipe, recipe.rows[1], inputs).flags
    assert flags["save-interval"] == inputs.save_interval and "exit-duration-in-mins" not in flags


def test_a_job_its_own_stop_would_cut_short_is_refused_naming_the_limit_that_fits(capsys):
    """The time check compared the expected run time with the SLURM limit only, so a row that fits its limit but not
    the earlier stop (which exits with status 0 after saving) was queued to end short of its iterations."""
    recipe = EXAMPLES / "qwen3_30b_a3b_mn5.toml"  # row 1 expects 13 min (10 x 17.4 s + 10 min start-up)
    options = ["recipe", str(recipe), "--dry-run", "--row", "1", "--save-interval", str(random.randrange(1, 10))]
    assert main([*options, "--time", "00:16:00"]) == 2  # fits 16 min, not the stop after 11
    err = capsys.readouterr().err
    assert "would stop (--exit-duration-in-mins 11: it exits and saves after 11 min) before its last iteration" in err
    assert "give it a time limit of at least 00:18:00" in err
    assert main([*options, "--time", "00:18:00"]) == 0
    assert "(the run stops and saves after 13 min)" in capsys.readouterr().out


def test_a_local_run_gets_no_exit(monkeypatch, tmp_path):
    """``--local`` runs on this machine with no time limit: its torchrun command has no exit duration."""
    from recipe_helpers import fake_local_launch

    import megatron.oellm.commands.recipe as recipe_command

    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    commands = []
    fake_local_launch(monkeypatch, lambda command, **_: commands.append(command) or type("Done", (), {"returncode": 0}))
    assert main(["recipe", str(RECIPE), "--local", "--row", "1", "--output-dir", str(tmp_path),
                 "--save-interval", "5"]) == 0
    (command,) = commands
    assert "--save-interval" in command and "--exit-duration-in-mins" not in command
