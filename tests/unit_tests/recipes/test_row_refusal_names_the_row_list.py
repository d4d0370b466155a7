"""``oellm recipe CONFIG --dry-run --row 7`` on a recipe of fewer rows said ``see --dry-run``, the option just given,
and then pointed to the dry run's row table, which a recipe with a refused row (the CKDA one) does not print. The
refusal now lists the rows itself (nodes and global batch), numbered as ``--row`` takes them."""

from __future__ import annotations

import random

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
    rows = load_recipe(config).rows
    listed = "; ".join(f"{number}: {row.nodes} nodes, GBS {row.global_batch_size}"
                       for number, row in enumerate(rows, start=1))
    assert f"has rows 1..{count}, not {wrong} ({listed})" in err, err
    assert "see --dry-run" not in err
    # the numbers are those --row takes: each listed row resolves alone, also in a recipe whose dry run without
    # --row is refused (the CKDA recipe's document-masked rows)
    number = random.randint(1, count)
    status = main(["recipe", str(config), "--dry-run", "--row", str(number)])
    out, err = capsys.readouterr()
    assert (status == 0 and f"-- row {number}: " in out) or (status == 2 and f"row {number}: " in err), (out, err)
