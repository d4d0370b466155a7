"""A recipe config read from a pipe (``oellm recipe <(sed ... X.toml)``: ``/dev/fd/N``) is read as a file was refused
as "not a regular file"; one with a relative ``extends`` (no folder to resolve it against) or without a ``name`` (the
pipe's ``63`` would name its runs) is refused in one line. A relative ``extends`` is resolved against the folder of
the real config file, so a symbolic link to a config elsewhere finds the base beside that config."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe

ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"


@contextmanager
def piped(text: str) -> Iterator[str]:
    """The ``/dev/fd/N`` path of a pipe holding ``text`` (written whole, the writing end closed), as a shell's
    ``<(...)`` gives it."""
    reader, writer = os.pipe()
    try:
        os.write(writer, text.encode())
        os.close(writer)
        yield f"/dev/fd/{reader}"
    finally:
        os.close(reader)


def _title() -> str:
    return f"title {random.randrange(10**6)}"


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_config_from_a_pipe_is_read_with_its_name_and_an_absolute_base() -> None:
    name, title = f"piped_{random.randrange(10**6)}", _title()
    with piped(f'name = "{name}"\ntitle = "{title}"\nextends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\n{ROW}') as path:
        recipe = load_recipe(path)
    assert (recipe.name, recipe.title, len(recipe.rows)) == (name, title, 1)


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_config_from_a_pipe_with_a_relative_base_or_no_name_is_one_error_line(capsys) -> None:
    with piped(f'name = "piped"\nextends = "_mn5.toml"\ntitle = "{_title()}"\n{ROW}') as path:
        assert main(["recipe", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "extends = '_mn5.toml' is relative, but this config is read from a pipe" in err
    with piped(f'title = "{_title()}"\nextends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\n{ROW}') as path:
        with pytest.raises(RecipeError, match=r"is a pipe, and its name '\d+' names no recipe.*set name ="):
            load_recipe(path)


def test_a_relative_base_is_beside_the_real_config_not_the_link(tmp_path: Path) -> None:
    """The base was looked up beside the link: a link to a config elsewhere found no base (or another one there)."""
    real, elsewhere = tmp_path / "configs", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    base_title, decoy_title = _title(), _title()
    for folder, title in ((real, base_title), (elsewhere, decoy_title)):
        (folder / "_base.toml").write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "{title}"\n')
    (real / "child.toml").write_text(f'extends = "_base.toml"\n{ROW}')
    link = elsewhere / "child.toml"
    link.symlink_to(real / "child.toml")
    assert load_recipe(link).title == base_title
