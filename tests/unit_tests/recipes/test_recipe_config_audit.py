"""Recipe values the loader must refuse or accept at their edges, found by a mutation audit of
:mod:`megatron.oellm.recipes.config`: a config without rows, the highest TCP port, a container runtime the job
script cannot run, a row's bad time limit, unknown parallel field or zero micro-batch size (each refused when the
recipe loads, so a row not selected cannot hide it), and ``--row 0``, which is no row."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import CONTAINER_RUNTIMES, MAX_TCP_PORT

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"


def _config(tmp_path, text: str):
    """A config extending the shipped Qwen3-30B-A3B MN5 recipe with ``text`` over it (its rows replace the base's)."""
    config = tmp_path / f"audit{random.randrange(10**6)}.toml"
    config.write_text(f'extends = "{BASE}"\ntitle = "t"\n{text}')
    return config


def test_a_config_without_rows_is_refused_naming_rows(tmp_path, capsys):
    """``rows = []`` (or a base run by mistake with its rows emptied) gave a recipe that ``--dry-run`` and
    ``--submit`` would accept and run nothing of; it must name the missing ``[[rows]]``."""
    config = _config(tmp_path, "rows = []\n")
    with pytest.raises(RecipeError, match=r"no \[\[rows\]\]; add at least one table row") as caught:
        load_recipe(config)
    assert str(config) in str(caught.value)
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert "no [[rows]]" in capsys.readouterr().err


def test_the_highest_tcp_port_is_a_valid_rendezvous_port(tmp_path):
    """Port 65535 is a TCP port torchrun can listen on: the range check must include its upper end, and the job
    script must export it."""
    config = _config(tmp_path, f"[cluster]\nmaster_port = {MAX_TCP_PORT}\n{ROW}")
    recipe = load_recipe(config)
    assert recipe.cluster.master_port == 65535
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    assert "MASTER_PORT=65535\n" in script


def test_a_container_runtime_the_job_cannot_run_is_refused(tmp_path):
    """The job script runs ``<runtime> exec --nv --bind`` and passes ``<RUNTIME>ENV_`` variables: a runtime such as
    ``docker`` or a typo would only fail on the compute nodes after the queue."""
    runtime = random.choice(["docker", "podman", "apptainr", "Apptainer"])
    with pytest.raises(RecipeError, match=rf"container_runtime must be one of apptainer, singularity, got '{runtime}'"):
        load_recipe(_config(tmp_path, f'[cluster]\ncontainer_runtime = "{runtime}"\n{ROW}'))
    for good in CONTAINER_RUNTIMES:
        assert load_recipe(_config(tmp_path, f'[cluster]\ncontainer_runtime = "{good}"\n{ROW}')).cluster \
            .container_runtime == good


def test_a_bad_row_time_limit_is_refused_when_the_recipe_loads(tmp_path, capsys):
    """A row's ``time = "1h"`` must be refused as the recipe loads, naming the row, not only when that row is
    resolved: ``--row 1`` of a recipe whose second row is broken must not pass, nor may ``--time`` hide it."""
    bad = random.choice(["1h", "1:2:3:4", "00:00:00", "90m"])
    config = _config(tmp_path, f'{ROW}{ROW}time = "{bad}"\n')
    with pytest.raises(RecipeError, match=r"row 2: time = ") as caught:
        load_recipe(config)
    assert repr(bad) in str(caught.value)
    assert main(["recipe", str(config), "--dry-run", "--row", "1", "--time", "01:00:00"]) == 2
    assert "row 2: time = " in capsys.readouterr().err


def test_an_unknown_parallel_field_of_a_row_is_refused_naming_the_fields(tmp_path, capsys):
    """A row's ``parallel = { tpp = 2 }`` must be refused as the recipe loads, with the layout's field names, not
    end ``oellm recipe`` in a ``dataclasses.replace`` TypeError when the row is resolved."""
    field = random.choice(["tpp", "vp", "dp", "expert_parallel"])
    config = _config(tmp_path, f"{ROW}parallel = {{ {field} = 2 }}\n")
    with pytest.raises(RecipeError, match=rf"row 1: unknown parallel override\(s\) \['{field}'\].*'tp', 'pp'"):
        load_recipe(config)
    assert main(["recipe", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown parallel override" in err


def test_a_zero_micro_batch_size_is_refused_naming_the_key(tmp_path, capsys):
    """``micro_batch_size = 0`` divided by zero in the batch check (a traceback); a negative one passed it. Both
    must be refused as the recipe loads, naming the key."""
    value = random.choice([0, -random.randrange(1, 64)])
    config = _config(tmp_path, ROW.replace("micro_batch_size = 4", f"micro_batch_size = {value}"))
    with pytest.raises(RecipeError, match=rf"row 1: micro_batch_size must be >= 1, got {value}"):
        load_recipe(config)
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert f"micro_batch_size must be >= 1, got {value}" in capsys.readouterr().err


def test_row_zero_is_no_row(tmp_path, capsys):
    """Rows are numbered from 1 as ``--dry-run`` lists them: ``--row 0`` read ``rows[-1]``, the last row, and would
    have submitted it."""
    recipe = load_recipe(BASE)
    with pytest.raises(RecipeError, match=rf"has rows 1..{len(recipe.rows)}, not 0"):
        recipe.row(0)
    assert recipe.row(len(recipe.rows)) is recipe.rows[-1] and recipe.row(1) is recipe.rows[0]
    assert main(["recipe", str(BASE), "--dry-run", "--row", "0"]) == 2
    assert f"rows 1..{len(recipe.rows)}, not 0" in capsys.readouterr().err
