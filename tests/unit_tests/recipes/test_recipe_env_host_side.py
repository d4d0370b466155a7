"""A recipe's ``env`` names that the job's own shell reads: ``PATH = "/opt/tools/bin:$PATH"`` was exported in the
batch shell as that literal text, so ``scontrol`` and ``sed`` were not found and the job ended under ``set -e`` after
its wait in the queue; such names now reach the container only (``APPTAINERENV_PATH``, whose ``$PATH`` the runtime
evaluates there). The ``SLURM_*`` names SLURM assigns in every job, which the job script, ``srun`` and each task
read, are refused when the recipe loads; the ``SLURM_*`` settings ``srun`` reads as options are exported."""

from __future__ import annotations

import random
import re
import shlex
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES
from sbatch_job_helpers import mn5_weak_recipe, run_job

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import CONTAINER_ONLY_VARIABLES, SLURM_JOB_VARIABLES

IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The ``PATH`` the container-runtime stand-in's image sets."""

EVALUATING_RUNTIME = f"""#!/bin/bash
# a container runtime's environment rules in miniature: the image sets its own PATH, then every host variable
# APPTAINERENV_NAME becomes NAME in the container, its $ evaluated there (as Apptainer does)
shift  # exec
while [[ "$1" == --* ]]; do [[ "$1" == --bind ]] && shift; shift; done
shift  # the image
export PATH={IMAGE_PATH}
while IFS='=' read -r name value; do eval "export ${{name#APPTAINERENV_}}=\\"$value\\""; done \\
  < <(env | grep '^APPTAINERENV_')
exec "$@"
"""
"""``apptainer exec`` that evaluates each ``APPTAINERENV_`` value in the container, over the image's ``PATH``."""

TORCHRUN_PATH = """#!/bin/bash
printf 'container path %s\\n' "$PATH" >> "$FAKE_RECORD"
"""
"""``torchrun``, found through the container's ``PATH`` only: records that ``PATH``."""


def test_a_path_with_a_dollar_reaches_the_container_and_leaves_the_job_its_commands(tmp_path):
    """The job finds ``scontrol``, ``srun`` and the runtime on the node's own PATH, and the container's PATH is the
    recipe's value with ``$PATH`` the image's: torchrun, in a folder only that value names, starts."""
    tools = tmp_path / f"tools-{random.randint(0, 10**6)}"
    tools.mkdir()
    (tools / "torchrun").write_text(TORCHRUN_PATH)
    (tools / "torchrun").chmod(0o755)
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), env={"PATH": f"{tools}:$PATH"})
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, random.randint(1, 4),
                             stand_ins=("scontrol", "srun", "apptainer"), runtimes={"apptainer": EVALUATING_RUNTIME})
    assert status == 0, (tmp_path / "stderr").read_text()
    assert record == [f"container path {tools}:{IMAGE_PATH}"]


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_the_names_the_jobs_shell_runs_its_commands_through_are_exported_for_the_container_only(tmp_path, runtime):
    name = random.choice(CONTAINER_ONLY_VARIABLES)
    value = random.choice([f"/opt/x{random.randint(0, 99)}", f"/opt/x{random.randint(0, 99)}:${name}"])
    recipe = mn5_weak_recipe(env={name: value}, container_runtime=runtime)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    exports = re.findall(rf"^export (\w*{name})=(.*)$", script, flags=re.MULTILINE)
    assert exports == [(f"{runtime.upper()}ENV_{name}", shlex.quote(value))]


def test_another_name_is_still_exported_in_the_jobs_shell_too(tmp_path):
    name = f"OELLM_PROBE_{random.randint(0, 999)}"
    value = random.choice([f"/x/{random.randint(0, 99)}", f"$TMPDIR/x{random.randint(0, 99)}"])
    recipe = mn5_weak_recipe(env={name: value})
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    quoted = shlex.quote(value)
    assert f"export {name}={quoted}\nexport APPTAINERENV_{name}={quoted}\n" in script


@pytest.mark.parametrize("table", ["cluster", "row"])
def test_a_variable_slurm_assigns_is_refused_before_anything_is_printed(tmp_path, capsys, table):
    name = random.choice(SLURM_JOB_VARIABLES)
    config = tmp_path / "slurm_env.toml"
    env = f'[cluster.env]\n{name} = "v"\n' if table == "cluster" else ""
    row_env = f'env = {{ {name} = "v" }}\n' if table == "row" else ""
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"}"\ntitle = "t"\n{env}'
                      f"[[rows]]\nnodes = 64\nglobal_batch_size = 2048\nmicro_batch_size = 1\n{row_env}")
    where = "[cluster.env]: " if table == "cluster" else "row 1: env "
    with pytest.raises(RecipeError, match=rf"{re.escape(where)}{name} is a variable SLURM assigns in every job, "
                                          "which the job script, srun or each task reads"):
        load_recipe(config)
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"{name} is a variable SLURM assigns" in captured.err
    assert captured.err.count("\n") == 1


def test_the_script_uses_only_slurm_variables_a_recipe_may_not_set():
    """Every ``$SLURM_...`` the job script reads is refused as an ``env`` name, so no recipe can replace it."""
    from megatron.oellm.recipes import slurm

    read = set(re.findall(r"\$\{?(SLURM_[A-Z_]+)", Path(slurm.__file__).read_text()))
    assert read and read <= set(SLURM_JOB_VARIABLES), read - set(SLURM_JOB_VARIABLES)


def test_an_srun_option_setting_is_exported_as_given(tmp_path):
    name = random.choice(["SLURM_CPU_BIND", "SLURM_HINT", "SLURM_MPI_TYPE", "SLURM_DISTRIBUTION"])
    config = tmp_path / "srun_env.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"}"\ntitle = "t"\n'
                      f'[cluster.env]\n{name} = "none"\n'
                      "[[rows]]\nnodes = 64\nglobal_batch_size = 2048\nmicro_batch_size = 1\n")
    assert load_recipe(config).cluster.env[name] == "none"
