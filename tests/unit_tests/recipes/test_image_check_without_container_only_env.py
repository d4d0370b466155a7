"""The job's checks of the image before ``srun`` run it without the recipe's container-only variables: a recipe's
``PATH = "/opt/tools/bin"`` (exported for the ranks as ``APPTAINERENV_PATH``) replaced the image's ``PATH`` in the
architecture check too, whose ``uname`` was then not found, and the job stopped with an error that blamed the image
("the image cannot run here ... an image built for ..."); the HybridEP build check's ``printenv`` was not found
either, and an image built for one node passed it."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from recipe_helpers import EXAMPLES
from sbatch_job_helpers import mn5_weak_recipe, run_job

from megatron.oellm.doctor.rules import HYBRID_EP_MULTINODE_VARIABLE
from megatron.oellm.recipes import load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes import slurm as slurm_module
from megatron.oellm.recipes.config import CONTAINER_ONLY_VARIABLES, CONTAINER_RUNTIMES, Recipe

RUNTIME_PATH_PREFIXES = {"apptainer": "APPTAINER SINGULARITY", "singularity": "SINGULARITY"}
"""The prefixes of the ``<PREFIX>ENV_PATH`` each runtime reads, first the one that wins: Apptainer also reads the
Singularity-era one."""

PATH_RUNTIME = """#!/bin/bash
# a container runtime's PATH rules in miniature: the image's PATH (where its uname and printenv are) and its
# {variable}, then the first <PREFIX>ENV_PATH set on the host over that PATH; the command is looked up in the
# container's PATH only
shift  # exec
while [[ "$1" == --* ]]; do [[ "$1" == --bind ]] && shift; shift; done
shift  # the image
export PATH=/usr/local/bin:/usr/bin:/bin {variable}="${{FAKE_IMAGE_BUILD:-1}}"
for prefix in {prefixes}; do
  variable="${{prefix}}ENV_PATH"
  if [ -n "${{!variable+x}}" ]; then export PATH="${{!variable}}"; break; fi
done
command -v "$1" > /dev/null || {{ echo "FATAL: \\"$1\\": executable file not found in \\$PATH" >&2; exit 255; }}
exec "$@"
"""
"""``exec`` of a runtime whose ``<PREFIX>ENV_PATH`` (``{prefixes}``, filled in by ``str.format`` with the image's
``{variable}``: :data:`HYBRID_EP_MULTINODE_VARIABLE`) replaces the image's ``PATH``, which then finds the command or
fails as the runtime does."""

TORCHRUN_PATH = """#!/bin/bash
printf 'container path %s\\n' "$PATH" >> "$FAKE_RECORD"
"""
"""``torchrun``, found through the recipe's ``PATH`` only: records the container's ``PATH``."""


def _tools_folder(tmp_path) -> str:
    """A folder of the recipe's own tools that holds ``torchrun`` (not the image's ``uname`` or ``printenv``)."""
    tools = tmp_path / f"tools-{random.randint(0, 10**6)}"
    tools.mkdir()
    (tools / "torchrun").write_text(TORCHRUN_PATH)
    (tools / "torchrun").chmod(0o755)
    return str(tools)


def _run(recipe: Recipe, tmp_path, runtime: str, nodes: int, env: dict[str, str]) -> tuple[int, list[str], str]:
    """Run row 1's job of ``recipe`` under the :data:`PATH_RUNTIME` stand-in ``runtime``; returns bash's status, the
    record and the job's stderr."""
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    stand_in = PATH_RUNTIME.format(prefixes=RUNTIME_PATH_PREFIXES[runtime], variable=HYBRID_EP_MULTINODE_VARIABLE)
    status, record = run_job(script, tmp_path, tmp_path, nodes, env=env,
                             stand_ins=("scontrol", "srun", runtime), runtimes={runtime: stand_in})
    return status, record, (tmp_path / "stderr").read_text()


@pytest.mark.parametrize(("runtime", "shell_prefix"),
                         [("apptainer", None), ("apptainer", "SINGULARITY"), ("singularity", None)])
def test_a_recipe_path_for_the_ranks_does_not_fail_the_architecture_check(tmp_path, monkeypatch, runtime,
                                                                             shell_prefix):
    """A ``PATH`` of the recipe's own tools only passes the image check, and the ranks still run with it; so does
    one beside a submitting shell's Singularity-era ``SINGULARITYENV_PATH``, which Apptainer reads when the job's
    ``APPTAINERENV_PATH`` is unset."""
    monkeypatch.setattr(slurm_module, "source_checkout", lambda: None)  # an installed copy: torchrun comes first
    tools = _tools_folder(tmp_path)
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), env={"PATH": tools}, container_runtime=runtime)
    env = {} if shell_prefix is None else {f"{shell_prefix}ENV_PATH": f"/nowhere-{random.randint(0, 99)}"}
    status, record, stderr = _run(recipe, tmp_path, runtime, random.randint(1, 4), env)
    assert status == 0, stderr
    assert record == [f"container path {tools}"]


@pytest.mark.parametrize("build", ["0", "1"])
def test_a_recipe_path_for_the_ranks_does_not_hide_a_single_node_hybrid_ep_image(tmp_path, monkeypatch, build):
    monkeypatch.setattr(slurm_module, "source_checkout", lambda: None)
    tools = _tools_folder(tmp_path)
    (tmp_path / "image.sif").touch()
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    cluster = dataclasses.replace(recipe.cluster, image=str(tmp_path / "image.sif"),
                                  env={**recipe.cluster.env, "PATH": tools})
    recipe = dataclasses.replace(recipe, cluster=cluster)
    status, record, stderr = _run(recipe, tmp_path, "apptainer", recipe.rows[0].nodes, {"FAKE_IMAGE_BUILD": build})
    if build == "1":
        assert status == 0 and record == [f"container path {tools}"], stderr
        return
    assert status == 1 and record == [], record
    (error,) = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: image {tmp_path / 'image.sif'} was built with HYBRID_EP_MULTINODE=0")


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
def test_every_container_only_variable_is_unset_for_the_image_checks(tmp_path, runtime):
    """``LD_LIBRARY_PATH`` and ``LD_PRELOAD`` too (a library only the ranks' binds hold), under either prefix."""
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, container_runtime=runtime))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    checks = re.findall(rf"\$\(env ((?:-u \w+ )+){runtime} exec \"\$IMAGE\" (uname -m|printenv)", script)
    expected = {f"{prefix.upper()}ENV_{name}" for name in CONTAINER_ONLY_VARIABLES for prefix in CONTAINER_RUNTIMES}
    assert [command for _, command in checks] == ["uname -m", "printenv"]
    assert all(set(unset.split()) - {"-u"} == expected for unset, _ in checks), checks
