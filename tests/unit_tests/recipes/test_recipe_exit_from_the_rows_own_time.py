"""A row that sets its own SLURM ``time`` (longer than the cluster's default) stops and saves before that limit, not
before the cluster's: the exit taken from the default would end every such checkpointing job early, losing the rest
of the time it waits for and pays for."""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.config import time_limit_seconds

RECIPE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"


def test_a_row_with_its_own_time_exits_before_that_limit(capsys):
    recipe = load_recipe(RECIPE)
    own = [number for number, row in enumerate(recipe.rows, 1)
           if row.time is not None and time_limit_seconds(row.time) > time_limit_seconds(recipe.cluster.time)]
    assert own, "the recipe has no row with a longer time limit of its own"
    number = random.choice(own)
    limit = time_limit_seconds(recipe.row_time(recipe.row(number)))
    assert limit == 45 * 60 and time_limit_seconds(recipe.cluster.time) == 30 * 60  # the recipe's rows and default
    assert main(["recipe", str(RECIPE), "--dry-run", "--row", str(number), "--save-interval",
                 str(random.randrange(1, 50))]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --time=00:45:00" in out
    # 45 min less the larger of 5 min and 5 %: 40 min (the 30-minute default would give 25)
    assert [line.strip() for line in out.splitlines() if "--exit-duration-in-mins" in line] == [
        "--exit-duration-in-mins 40"]


def test_the_margin_by_hand():
    """The margin's constants, not only its formula: 5 min under an hour-long limit (60 - 5 = 55), 5 % under four
    hours (240 - 12 = 228), and none under a limit of 5 min or less (nothing to save in)."""
    from megatron.oellm.recipes.resolve import exit_duration_minutes

    assert exit_duration_minutes(3600) == 55
    assert exit_duration_minutes(4 * 3600) == 228
    assert exit_duration_minutes(300) is None
