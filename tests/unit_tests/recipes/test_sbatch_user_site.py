"""The generated sbatch script keeps the user's own site-packages out of the container's Python: Apptainer mounts
``$HOME``, and ``~/.local/lib/pythonX.Y/site-packages`` comes before the image's site-packages, so a ``pip install
--user`` on the login node could replace the image's torch or Transformer Engine in every rank."""

from __future__ import annotations

import os
import random
import sys
import sysconfig
from pathlib import Path

import pytest
from test_sbatch_runs import RUNTIME_ENVIRONMENT, _recipe, _run_job

from megatron.oellm.recipes import resolve_row, sbatch_text

TORCHRUN_USER_SITE = """#!/bin/bash
"$OELLM_PYTHON" -c 'import importlib.util; print("user module", importlib.util.find_spec("{module}") is not None)' \
  >> "$FAKE_RECORD"
"""


def user_site_job(tmp_path: Path, cluster_env: dict[str, str], runtime: str) -> list[str]:
    """Run the job of a recipe with ``cluster_env`` under the container-runtime stand-in ``runtime``, with a module in
    the user's site-packages (under PYTHONUSERBASE); returns the torchrun stand-in's record: whether the job's Python
    could import that module."""
    (tmp_path / "image.sif").touch()
    module = f"oellm_user_probe_{random.randint(0, 10**6)}"
    user_base = tmp_path / "home" / ".local"
    user_site = Path(sysconfig.get_path("purelib", f"{os.name}_user", vars={"userbase": str(user_base)}))
    user_site.mkdir(parents=True)
    (user_site / f"{module}.py").write_text("SHADOWS_THE_IMAGE = True\n")
    recipe = _recipe(image=str(tmp_path / "image.sif"), env=cluster_env)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = _run_job(script, tmp_path, tmp_path, 2, torchrun=TORCHRUN_USER_SITE.format(module=module),
                              env={"PYTHONUSERBASE": str(user_base), "OELLM_PYTHON": sys.executable},
                              runtimes={"apptainer": runtime})
    assert status == 0, (tmp_path / "stderr").read_text()
    return record


@pytest.mark.parametrize("cluster_env, reachable", [({}, False), ({"PYTHONNOUSERSITE": ""}, True)])
def test_the_users_site_packages_stay_out_of_the_container_unless_the_recipe_lets_them_in(tmp_path, cluster_env,
                                                                                          reachable):
    """A module in the user's site-packages (here under PYTHONUSERBASE) is not importable by the job's Python; a
    recipe that sets ``PYTHONNOUSERSITE = ""`` in ``[cluster.env]`` gets it back (Python ignores an empty value)."""
    record = user_site_job(tmp_path, cluster_env, RUNTIME_ENVIRONMENT.format(prefix="APPTAINER"))
    assert record == [f"user module {reachable}"]
