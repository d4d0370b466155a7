"""A recipe ``env`` value with a ``$``: a SLURM job's container runtime evaluates its ``APPTAINERENV_`` copy in the
container (what Apptainer's ``--no-eval`` turns off), so the job script passes it through; ``--local`` hands it to
torchrun as written, so there it is refused before torchrun starts, naming the variable."""

from __future__ import annotations

import dataclasses
import random

from recipe_helpers import EXAMPLES, fake_local_launch

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command
from megatron.oellm.recipes import load_recipe, resolve_row, sbatch_text

VALUES = ["$TMPDIR/triton", "/scratch/${USER}/cache", "/p/project/run-$SLURM_JOB_ID"]


def _recipe_with(tmp_path, key: str, value: str):
    config = tmp_path / "env.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"}"\ntitle = "env"\n'
                      f'[cluster.env]\n{key} = "{value}"\n')
    return config


def test_local_refuses_a_value_with_a_dollar_before_torchrun(tmp_path, monkeypatch, capsys):
    key, value = f"OELLM_PROBE_{random.randint(0, 999)}", random.choice(VALUES)
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []
    fake_local_launch(monkeypatch, lambda *a, **k: calls.append(a))
    assert main(["recipe", str(_recipe_with(tmp_path, key, value)), "--local", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--local: {key} = {value!r} in the recipe's env is handed to torchrun as written" in err, err
    assert not calls


def test_a_slurm_job_passes_the_value_to_its_container_runtime(tmp_path):
    """The job script exports the value (single-quoted, for the runtime to evaluate in the container), and a dry run
    of the recipe passes."""
    key, value = f"OELLM_PROBE_{random.randint(0, 999)}", random.choice(VALUES)
    recipe = load_recipe(_recipe_with(tmp_path, key, value))
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, image="image.sif"))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    assert f"export APPTAINERENV_{key}='{value}'" in script
