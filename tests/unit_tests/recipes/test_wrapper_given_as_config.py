"""``oellm recipe X.sh`` (a recipe's shell wrapper where its config belongs) printed TOML's parse error at the
script's first command ("Expected '=' after a key ... at line 7"); it now says the file is the wrapper and names both
ways to run the recipe, while a config whose first line is a ``#!`` comment still loads."""

from __future__ import annotations

import random
import shlex

import pytest
from recipe_helpers import CONFIGS, EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe

WRAPPERS = sorted(path for path in EXAMPLES.glob("*.sh") if path.with_suffix(".toml").is_file())


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda path: path.stem)
def test_a_recipe_wrapper_names_the_bash_command_and_its_config(capsys, wrapper):
    assert main(["recipe", str(wrapper), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{wrapper} is the shell wrapper of the recipe {wrapper.stem}.toml" in err, err
    assert f"bash {shlex.quote(str(wrapper))} --dry-run" in err
    assert f"oellm recipe {shlex.quote(str(wrapper.with_suffix('.toml')))} --dry-run" in err
    assert "not valid TOML" not in err and err.count("\n") == 1


def test_a_script_without_a_config_beside_it_is_named_a_shell_script(tmp_path, capsys):
    """A ``#!`` script of another name (no ``.sh``, no config of its stem beside it) is no wrapper to name, but still
    no TOML; a valid config whose first line is a ``#!`` comment is no script."""
    script = tmp_path / f"run{random.randrange(10**6)}"
    script.write_text(f"#!/bin/sh\nexec oellm recipe {random.choice(CONFIGS)} \"$@\"\n")
    assert main(["recipe", str(script)]) == 2
    err = capsys.readouterr().err
    assert f"{script} is a shell script, not a recipe config" in err and "not valid TOML" not in err, err
    config = tmp_path / "shebang.toml"
    config.write_text(f"#!/usr/bin/env oellm recipe\nextends = \"{random.choice(CONFIGS)}\"\n")
    assert load_recipe(config).rows


def test_a_config_with_a_comment_first_and_a_toml_error_is_refused_as_toml(tmp_path, capsys):
    """Only a ``#!`` line marks a script: a config opening with an ordinary ``#`` comment and holding a TOML error is
    refused with TOML's parse error, not as a shell script."""
    config = tmp_path / f"broken{random.randrange(10**6)}.toml"
    config.write_text(f"# my recipe\nextends = \"{random.choice(CONFIGS)}\"\ntitle = \n")
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: not valid TOML" in err and "shell" not in err, err
