"""``oellm recipe CONFIG --dry-run --row 7`` on a recipe of fewer rows said ``see --dry-run``, the option just given.
The refusal now names what lists the rows, the dry run's row table without ``--row``, and that table does list them,
numbered as ``--row`` takes them."""

from __future__ import annotations

import random
import re

import pytest
from recipe_helpers import CONFIGS

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe


@pytest.mark.parametrize("mode", [["--dry-run"], []])
def test_a_row_past_the_last_is_refused_naming_what_lists_the_rows(capsys, mode):
    config = random.choice(CONFIGS)
    count = len(load_recipe(config).rows)
    wrong = count + random.randint(1, 9)
    assert main(["recipe", str(config), *mode, "--row", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert f"has rows 1..{count}, not {wrong}; the row table of its dry run without --row lists them" in err
    assert "see --dry-run" not in err
    assert main(["recipe", str(config), *mode]) == 0
    table = re.findall(r"^ +(\d+) +\d+ +\d+ ", capsys.readouterr().out, flags=re.M)
    assert table[:count] == [str(number) for number in range(1, count + 1)]
