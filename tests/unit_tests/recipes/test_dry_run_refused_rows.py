"""A dry run of every row of a recipe with a refused row: the refusal names the other refused rows and those that
resolve, with the ``--row`` that prints one. The CKDA recipe's default command (a dry run of all rows) printed one
error about row 1 and no row, and did not say that row 3 works."""

from __future__ import annotations

import pytest
from recipe_helpers import EXAMPLES

import megatron.oellm.commands.recipe as recipe_command
from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError

CKDA = str(EXAMPLES / "oellm_ckda_hybrid_mn5.toml")
STRONG = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")


def test_the_ckda_dry_run_names_the_row_that_resolves(capsys):
    assert main(["recipe", CKDA]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith("oellm recipe: error: row 1: --dataloader-inter-document-masking: document masking is")
    assert line.endswith("; row 2 is refused too; row 3 resolves (--row 3 prints it)")


def test_a_selected_refused_row_alone_gets_its_refusal_only(capsys):
    assert main(["recipe", CKDA, "--row", "2"]) == 2
    _out, err = capsys.readouterr()
    assert err.startswith("oellm recipe: error: row 2: --dataloader-inter-document-masking") and "resolve" not in err


@pytest.mark.parametrize("refused, tail", [
    ({2, 5}, "; row 5 is refused too; rows 1, 3, 4, 6 resolve (--row N prints one)"),
    ({1, 2, 3, 4, 5, 6}, "; rows 2, 3, 4, 5, 6 are refused too; no row resolves"),
])
def test_refused_and_resolving_rows_are_named_in_row_order(monkeypatch, capsys, refused, tail):
    real = recipe_command.resolve_job

    def resolve_or_refuse(recipe, number, inputs, **kwargs):
        if number in refused:
            raise RecipeError(f"row {number}: refused by the test")
        return real(recipe, number, inputs, **kwargs)

    monkeypatch.setattr(recipe_command, "resolve_job", resolve_or_refuse)
    assert main(["recipe", STRONG]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"oellm recipe: error: row {min(refused)}: refused by the test{tail}\n"


def test_a_dry_run_whose_rows_all_resolve_prints_them_all(capsys):
    assert main(["recipe", STRONG]) == 0
    out, _err = capsys.readouterr()
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("-- row ")] == [
        f"-- row {n}" for n in range(1, 7)]
