"""A recipe's Megatron flags are checked file by file at load: an array for a flag of one value (``lr = [1, 2]``,
which reached the job's parser as the unknown argument ``2``) and a name the training entry does not know are
refused in one error line naming the config file that holds the flag, a shared base's included, and its table."""

from __future__ import annotations

import random
import re
import string
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe
from megatron.oellm.training.args import oellm_parser

BASE = EXAMPLES / "_mn5.toml"
ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"


def _flags(several: bool) -> list[str]:
    """The training entry's flag names (without ``--``) that take one value, or those that take several (``nargs``
    '+' or '*')."""
    return sorted(option[2:] for option, action in oellm_parser()._option_string_actions.items()
                  if option.startswith("--") and (action.nargs in ("+", "*") if several else action.nargs is None))


def _array(length: int) -> str:
    """A TOML array of ``length`` random integers."""
    return f"[{', '.join(str(random.randrange(1, 1000)) for _ in range(length))}]"


def _recipe(tmp_path: Path, flags: str = "", row_flags: str = "", base_flags: str = "") -> tuple[Path, Path]:
    """A recipe (the path returned first) extending a middle base (second) that extends the shipped MN5 base;
    ``flags`` are the recipe's [megatron_flags] lines, ``row_flags`` its one row's inline flags, ``base_flags`` the
    middle base's [megatron_flags] lines."""
    middle = tmp_path / "_shared.toml"
    middle.write_text(f'extends = "{BASE}"\nmodel = "qwen3-30b-a3b"\n[parallel]\ntp = 1\npp = 4\nep = 4\n'
                      f"[local]\nnum_layers = 2\n[megatron_flags]\n{base_flags}\n")
    config = tmp_path / "recipe.toml"
    config.write_text(f'extends = "{middle.name}"\ntitle = "flags"\n[megatron_flags]\n{flags}\n'
                      f"{ROW}flags = {{ {row_flags} }}\n")
    return config, middle


def _refusal(config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of ``oellm recipe CONFIG --dry-run --row 1``, which must refuse it."""
    monkeypatch.chdir(config.parent)
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("table", ["recipe", "row", "base"])
def test_an_array_for_a_flag_of_one_value_is_refused_at_load_naming_the_file_table_and_flag(
        tmp_path, monkeypatch, capsys, table):
    """``lr = [1, 2]`` stopped the dry run with the parser's ``unrecognized arguments: 2``, naming neither the flag
    nor where it was set; an empty or one-item array is no value either."""
    flag = random.choice(_flags(several=False))
    line = f"{flag} = {_array(random.randrange(0, 4))}"
    config, middle = _recipe(tmp_path, **{"recipe": {"flags": line}, "row": {"row_flags": line},
                                          "base": {"base_flags": line}}[table])
    holder = middle if table == "base" else config
    where = "row 1's flags" if table == "row" else "[megatron_flags]"
    refusal = (rf"^{re.escape(str(holder))}: --{flag} takes one value, but is given the array "
               rf".*\(in {re.escape(where)}\)$")
    with pytest.raises(RecipeError, match=refusal):
        load_recipe(config)
    assert _refusal(config, monkeypatch, capsys).startswith(
        f"oellm recipe: error: {holder}: --{flag} takes one value, but is given the array ")


def test_an_array_for_a_flag_of_several_values_loads(tmp_path):
    """The flags of several values (``nargs`` '+' or '*': recompute-modules, data-path, ...) take an array."""
    several = random.sample(_flags(several=True), 3)
    config, _ = _recipe(tmp_path, flags=f"{several[0]} = {_array(2)}", row_flags=f"{several[1]} = {_array(1)}",
                        base_flags=f"{several[2]} = {_array(3)}")
    recipe = load_recipe(config)
    assert {several[0], several[2]} <= set(recipe.megatron_flags) and several[1] in recipe.rows[0].flags


def _misspelt() -> str:
    """A name no option of the training entry has: a real flag with random letters appended (drawn again where
    that makes another option, as ``no-load`` and ``optim`` make ``no-load-optim``)."""
    options = oellm_parser()._option_string_actions
    while True:
        suffix = "".join(random.choices(string.ascii_lowercase, k=random.randrange(3, 7)))
        name = f"{random.choice(_flags(several=False))}-{suffix}"
        if f"--{name}" not in options:
            return name


@pytest.mark.parametrize("in_base", [True, False])
def test_an_unknown_flag_name_is_refused_naming_the_file_that_holds_it(tmp_path, monkeypatch, capsys, in_base):
    """A misspelt flag in a shared base was refused as ``'x' in [megatron_flags]``, which sent its user to the
    recipe: the refusal must name the base when the name is there, the recipe when it is in the recipe."""
    name = _misspelt()
    value = random.choice(["true", "false", str(random.randrange(100)), '"x"'])
    config, middle = _recipe(tmp_path, **{"base_flags" if in_base else "flags": f"{name} = {value}"})
    holder = middle if in_base else config
    assert _refusal(config, monkeypatch, capsys).startswith(
        f"oellm recipe: error: {holder}: {name!r} in [megatron_flags] is not an option of the training entry")


def test_an_unknown_flag_name_in_a_row_is_refused_naming_the_file_and_row(tmp_path, monkeypatch, capsys):
    name = _misspelt()
    config, _ = _recipe(tmp_path, row_flags=f"{name} = {random.randrange(100)}")
    assert _refusal(config, monkeypatch, capsys).startswith(
        f"oellm recipe: error: {config}: {name!r} in row 1's flags is not an option of the training entry")


@pytest.mark.parametrize("table", ["recipe", "base"])
def test_a_flag_value_no_flag_takes_is_refused_naming_the_file_and_the_flag_alone(
        tmp_path, monkeypatch, capsys, table):
    """A TOML table or date as a flag's value (``lr = { a = 1 }``) was refused as the whole merged
    ``megatron_flags = {...}`` table (every flag of every file, printed) of the recipe, without the file or the flag:
    now the file holding it, the flag, its value and the types a flag takes."""
    flag = random.choice(_flags(several=False))
    value, shown = random.choice([(f"{{ a = {random.randrange(1, 99)} }}", "{'a': "),
                                  (f"2024-{random.randrange(1, 13):02d}-01", "datetime.date(2024, ")])
    line = f"{flag} = {value}"
    config, middle = _recipe(tmp_path, **({"flags": line} if table == "recipe" else {"base_flags": line}))
    err = _refusal(config, monkeypatch, capsys)
    holder = config if table == "recipe" else middle
    assert f"{holder.name}: {flag} = {shown}" in err, err
    assert "in [megatron_flags] is not a boolean or number or string or array of values" in err, err
    assert "megatron_flags = {" not in err, err


def test_the_rows_of_a_base_that_the_recipe_replaces_are_not_checked(tmp_path, monkeypatch, capsys):
    """A recipe's own ``rows`` replace its base's whole, so a base row's flag (``lr = [1, 2]``) reaches no job: the
    recipe loads and runs its own row; a recipe without rows of its own is refused naming the base's row."""
    middle = tmp_path / "_rows.toml"
    array = _array(random.randint(2, 4))
    middle.write_text(f'extends = "{BASE}"\nmodel = "qwen3-30b-a3b"\n[parallel]\ntp = 1\npp = 4\nep = 4\n'
                      f"[local]\nnum_layers = 2\n{ROW}flags = {{ lr = {array} }}\n")
    own_rows = tmp_path / "own.toml"
    own_rows.write_text(f'extends = "{middle.name}"\ntitle = "own rows"\n{ROW}')
    assert len(load_recipe(own_rows).rows) == 1
    monkeypatch.chdir(tmp_path)
    assert main(["recipe", str(own_rows), "--dry-run", "--row", "1"]) == 0
    capsys.readouterr()
    inherited = tmp_path / "inherited.toml"
    inherited.write_text(f'extends = "{middle.name}"\ntitle = "inherited rows"\n')
    err = _refusal(inherited, monkeypatch, capsys)
    assert f"{middle.name}: --lr takes one value" in err and "(in row 1's flags)" in err, err
