"""Environment variable names of a recipe's ``env`` tables are checked when the recipe loads, so ``--local`` refuses
a name the SLURM job script would refuse, before torchrun starts anything (it passed them to torchrun unchecked)."""

from __future__ import annotations

import subprocess

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command

BAD_NAMES = ("1BAD", "A-B", "A B", "", "A=B", "A\n")


def _config(tmp_path, table: str, name: str):
    """A copy of the Qwen3-30B-A3B MN5 recipe with ``name = "x"`` in its cluster's or its first row's env."""
    config = tmp_path / "env.toml"
    base = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
    key = '"' + name.replace("\n", "\\n") + '"'
    if table == "cluster":
        config.write_text(f'extends = "{base}"\n[cluster.env]\n{key} = "x"\n')
    else:
        text = base.read_text().replace("extends = \"_mn5.toml\"", f'extends = "{EXAMPLES / "_mn5.toml"}"')
        config.write_text(text.replace('label = "HybridEP, forced balancing', f'env = {{ {key} = "x" }}\nlabel = '
                                       '"HybridEP, forced balancing', 1))
    return config


@pytest.mark.parametrize("table", ["cluster", "row"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_local_refuses_an_invalid_env_name_before_torchrun(tmp_path, monkeypatch, capsys, table, name):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or subprocess.CompletedProcess(a, 0))
    assert main(["recipe", str(_config(tmp_path, table, name)), "--local", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{name!r} is not a valid environment variable name" in err and not calls
    assert ("[cluster.env]" if table == "cluster" else "row 1: env") in err


@pytest.mark.parametrize("name", BAD_NAMES)
def test_dry_run_refuses_it_when_the_recipe_loads(tmp_path, capsys, name):
    assert main(["recipe", str(_config(tmp_path, "cluster", name)), "--dry-run", "--row", "1"]) == 2
    captured = capsys.readouterr()
    assert f"{name!r} is not a valid environment variable name" in captured.err and "== " not in captured.out


@pytest.mark.parametrize("name", ["_A1", "a", "NCCL_DEBUG"])
def test_a_valid_name_reaches_the_local_run(tmp_path, monkeypatch, name):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    envs = []

    class Done:
        returncode = 0

    monkeypatch.setattr(subprocess, "run", lambda command, env, check: envs.append(env) or Done())
    assert main(["recipe", str(_config(tmp_path, "row", name)), "--local", "--row", "1"]) == 0
    assert envs[0][name] == "x"
