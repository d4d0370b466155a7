"""Helpers of the recipe tests that run a generated sbatch script end to end under bash: stand-ins for ``scontrol``,
``srun``, ``apptainer`` and ``torchrun`` that record what reaches them, a job run with them first on PATH, the
example recipes those tests write scripts of (with their cluster settings replaced), and the job of the
user's-site-packages tests."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import Recipe

SCONTROL = """#!/bin/bash
# one write per host name, as a long `scontrol show hostnames` fills more than one pipe buffer
for i in $(seq 1 "$FAKE_NODES"); do echo "node$i"; done
"""
"""``scontrol show hostnames``: ``node1`` to ``node$FAKE_NODES``."""
SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
export SLURM_NODEID=0  # one task stands for all: the first node's, as srun sets it
exec "$@"
"""
"""``srun``: runs its command once, as node 0's task."""
APPTAINER = """#!/bin/bash
shift  # exec
while [[ "$1" == --* ]]; do
  if [[ "$1" == --bind ]]; then printf 'bind %s\\n' "$2" >> "$FAKE_RECORD"; shift; fi
  shift
done
[ -f "$1" ] || { echo "apptainer: image $1 not found in $PWD" >&2; exit 255; }
shift
# the image's own environment: APPTAINERENV_PYTHONPATH (else the Singularity-era SINGULARITYENV_PYTHONPATH) replaces
# an image's PYTHONPATH, which replaces the host's
if [ -n "${APPTAINERENV_PYTHONPATH+x}" ]; then export PYTHONPATH="$APPTAINERENV_PYTHONPATH"
elif [ -n "${SINGULARITYENV_PYTHONPATH+x}" ]; then export PYTHONPATH="$SINGULARITYENV_PYTHONPATH"
elif [ -n "${FAKE_IMAGE_PYTHONPATH:-}" ]; then export PYTHONPATH="$FAKE_IMAGE_PYTHONPATH"; fi
# an image of another architecture: its programs do not start (no emulator), or report their own (an emulator)
if [ "${FAKE_IMAGE_ARCH:-}" = none ]; then echo "FATAL: $1: exec format error" >&2; exit 255; fi
if [ -n "${FAKE_IMAGE_ARCH:-}" ] && [ "$1" = uname ]; then echo "$FAKE_IMAGE_ARCH"; exit 0; fi
exec "$@"
"""
"""``apptainer exec``: records each ``--bind``, needs the image file, applies the runtime's
``PYTHONPATH`` rules, and stands for an image of another architecture under ``FAKE_IMAGE_ARCH``."""
TORCHRUN = """#!/bin/bash
printf 'pwd %s\\n' "$PWD" >> "$FAKE_RECORD"
printf 'pythonpath %s\\n' "${PYTHONPATH-<unset>}" >> "$FAKE_RECORD"
printf 'torchrun %s\\n' "$*" >> "$FAKE_RECORD"
exit "$FAKE_EXIT"
"""
"""``torchrun``: records its folder, ``PYTHONPATH`` and argv, and exits ``$FAKE_EXIT``."""

RUNTIME_ENVIRONMENT = """#!/bin/bash
# a container runtime's environment rules in miniature: the image sets OELLM_PROBE, then every host variable
# {prefix}ENV_NAME becomes NAME in the container, over the image's value; another runtime's prefix means nothing
shift  # exec
while [[ "$1" == --* ]]; do [[ "$1" == --bind ]] && shift; shift; done
shift  # the image
export OELLM_PROBE=image-value
while IFS='=' read -r name value; do export "${{name#{prefix}ENV_}}=$value"; done < <(env | grep '^{prefix}ENV_')
exec "$@"
"""
"""A container runtime's ``exec`` with the environment rules of the runtime whose variables start with ``{prefix}``
(filled in by ``str.format``: ``APPTAINER``, ``SINGULARITY``), over an image that sets ``OELLM_PROBE``."""


def example_recipe(file_name: str, **cluster: object) -> Recipe:
    """The example recipe ``file_name`` (under ``EXAMPLES``) with ``cluster`` replacing its cluster settings."""
    recipe = load_recipe(EXAMPLES / file_name)
    return dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, **cluster))


def mn5_weak_recipe(**cluster: object) -> Recipe:
    """The MareNostrum 5 weak-scaling example recipe with ``cluster`` replacing its cluster settings."""
    return example_recipe("qwen3_5_35b_a3b_mn5_weak.toml", **cluster)


def mn5_attention_recipe(**cluster: object) -> Recipe:
    """The MareNostrum 5 attention-only example recipe with ``cluster`` replacing its cluster settings."""
    return example_recipe("qwen3_5_35b_a3b_mn5_attention.toml", **cluster)


def run_job(script: str, tmp_path: Path, cwd: Path, nodes: int, exit_status: int = 0, job_id: int | None = None,
            torchrun: str = TORCHRUN, env: dict[str, str] | None = None,
            stand_ins: tuple[str, ...] = ("scontrol", "srun", "apptainer", "torchrun"),
            runtimes: dict[str, str] | None = None, scontrol: str = SCONTROL) -> tuple[int, list[str]]:
    """Run ``script`` as SLURM job ``job_id`` (default: random) with ``sbatch``'s working directory ``cwd``, the
    ``stand_ins`` (``torchrun`` and ``scontrol`` as given, container runtimes from ``runtimes`` over the Apptainer
    one) first on PATH and ``env`` over the environment; return bash's exit status and the stand-ins' record lines
    (the job's stdout and stderr, its log, are left in ``tmp_path / "stdout"`` and ``tmp_path / "stderr"``)."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    texts = {"scontrol": scontrol, "srun": SRUN, "apptainer": APPTAINER, "torchrun": torchrun, **(runtimes or {})}
    for name in stand_ins:
        text = texts[name]
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record"
    record.write_text("")
    job = tmp_path / "job.sbatch"
    job.write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_NODES": str(nodes),
           "FAKE_RECORD": str(record), "FAKE_EXIT": str(exit_status), "SLURM_JOB_NODELIST": f"node[1-{nodes}]",
           "SLURM_NNODES": str(nodes), "SLURM_JOB_ID": str(job_id or random.randint(1, 10**6)), **(env or {})}
    done = subprocess.run([shutil.which("bash"), str(job)], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False)
    (tmp_path / "stdout").write_text(done.stdout)
    (tmp_path / "stderr").write_text(done.stderr)
    return done.returncode, record.read_text().splitlines()


TORCHRUN_USER_SITE = """#!/bin/bash
"$OELLM_PYTHON" -c 'import importlib.util; print("user module", importlib.util.find_spec("{module}") is not None)' \
  >> "$FAKE_RECORD"
"""
"""``torchrun``: records whether the job's Python (``$OELLM_PYTHON``) imports ``{module}``."""


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
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), env=cluster_env)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, 2, torchrun=TORCHRUN_USER_SITE.format(module=module),
                             env={"PYTHONUSERBASE": str(user_base), "OELLM_PYTHON": sys.executable},
                             runtimes={"apptainer": runtime})
    assert status == 0, (tmp_path / "stderr").read_text()
    return record
