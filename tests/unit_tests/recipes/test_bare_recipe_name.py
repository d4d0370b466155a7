"""``oellm recipe qwen3_5_35b_a3b_mn5_strong`` (a recipe's bare name, or its file named in another folder) said only
that the shipped configs are examples/oellm/*.toml "of the repository"; run from a checkout, the refusal now names
the shipped config by absolute path. An installed copy (no checkout, no configs) keeps the old text."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from recipe_helpers import CONFIGS, EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import toml_loading


def test_a_bare_or_misplaced_recipe_name_names_the_shipped_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no config of that name here
    config = random.choice(CONFIGS)
    for given in (config.stem, f"elsewhere/{config.stem}.sh", f"{config.stem}.toml"):
        assert main(["recipe", given, "--dry-run"]) == 2
        assert capsys.readouterr().err == (f"oellm recipe: error: recipe config {given} does not exist; did you mean "
                                           f"{EXAMPLES / config.name}?\n")


def test_a_name_like_no_shipped_recipe_names_the_checkouts_config_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    given = f"x{random.randrange(10**6)}"
    assert main(["recipe", given]) == 2
    assert capsys.readouterr().err == (f"oellm recipe: error: recipe config {given} does not exist; the shipped "
                                       f"configs are {EXAMPLES}/*.toml\n")


@pytest.mark.parametrize("checkout", ["installed copy", "checkout without examples/oellm"])
def test_without_a_config_folder_the_refusal_says_where_the_configs_are_in_the_repository(tmp_path, monkeypatch,
                                                                                           capsys, checkout):
    """An installed copy has no checkout; a source folder without ``examples/oellm`` (a partial copy of the checkout)
    has no configs to name either: the refusal says where they are in the repository, not a folder that does not
    exist."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(toml_loading, "source_checkout", lambda: None if checkout == "installed copy" else tmp_path)
    given = random.choice(CONFIGS).stem
    assert main(["recipe", given]) == 2
    assert capsys.readouterr().err == (f"oellm recipe: error: recipe config {given} does not exist; the shipped "
                                       "configs are examples/oellm/*.toml of the repository (a checkout, not the "
                                       "wheel)\n")


def test_a_misspelt_name_lists_the_closest_shipped_configs(tmp_path, monkeypatch, capsys):
    """``qwen3_30b_a3b_mn5_strong`` (no such recipe: Qwen3-30B has one, ``qwen3_30b_a3b_mn5``) was answered with the
    single closest name, Qwen3.5's strong-scaling recipe; the three closest are listed, the intended one among them."""
    monkeypatch.chdir(tmp_path)
    assert main(["recipe", "qwen3_30b_a3b_mn5_strong", "--dry-run"]) == 2
    error = capsys.readouterr().err
    assert "did you mean one of " in error and f" in {EXAMPLES}?" in error, error
    listed = error.split("did you mean one of ")[1].split(" in ")[0].split(", ")
    assert "qwen3_30b_a3b_mn5.toml" in listed and len(listed) == 3
    assert all((EXAMPLES / name).is_file() for name in listed)


def test_a_name_with_a_dot_is_matched_whole(tmp_path, monkeypatch, capsys):
    """``qwen3.5_35b_a3b_mn5_strong`` (the model's dot where the config has ``_``) has no ``.toml`` or ``.sh`` suffix:
    the whole name is matched, not its part before the dot, and the intended config is listed."""
    monkeypatch.chdir(tmp_path)
    config = random.choice([path for path in CONFIGS if path.stem.startswith("qwen3_5_")])
    given = config.stem.replace("qwen3_5_", "qwen3.5_", 1)
    assert main(["recipe", given]) == 2
    assert f"{config.name}" in capsys.readouterr().err.split("did you mean one of ")[1]


def test_a_base_config_is_never_offered(tmp_path, monkeypatch, capsys):
    """The ``_``-prefixed configs are bases that recipes extend, not recipes to run: neither a base's own name nor a
    name closest to one (``qwen3_5_35b_a3b_mn5``, the Qwen3.5 base without its ``_``) is answered with a base."""
    monkeypatch.chdir(tmp_path)
    base = random.choice(sorted(EXAMPLES.glob("_*.toml")))
    for given in (base.name, base.stem.removeprefix("_")):
        assert main(["recipe", given]) == 2
        hint = capsys.readouterr().err.split(" does not exist; ")[1]
        offered = (hint.removeprefix("did you mean one of ").split(" in ")[0].split(", ")
                   if hint.startswith("did you mean one of ") else
                   [Path(hint.removeprefix("did you mean ")).name] if hint.startswith("did you mean ") else [])
        assert not any(name.startswith("_") for name in offered), hint
