"""The sbatch script: shell-safe with hostile user values, exact argv round trip through bash, submission."""

from __future__ import annotations

import dataclasses
import random
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES, fake_sbatch
from sbatch_job_helpers import mn5_attention_recipe

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.host_paths import check_host_paths
from megatron.oellm.recipes.submission import submit

HOSTILE = "/scratch/my images/o'ellm $(touch pwned) `touch pwned2`.sif"


def _bash_values(script: str, tmp_path: Path) -> list[str]:
    """Run the script's variable and array assignments in bash; return $IMAGE, then every MEGATRON_ARGS element."""
    body = script.split("srun --kill-on-bad-exit")[0]
    before = body.split("if ! command -v apptainer")[0]  # the image checks need Apptainer: none here
    body = before + body.split('NODE_ARCH="$(uname -m)"')[1].split("\nfi\n", 1)[1]
    body = "\n".join(line for line in body.splitlines()
                     if not line.startswith(("MASTER_ADDR", "mkdir", "cd ")))
    program = body + '\nprintf "%s\\0" "$IMAGE" "$NCCL_MIN_NCHANNELS" "${MEGATRON_ARGS[@]}"\n'
    done = subprocess.run(["bash", "-c", program], capture_output=True, cwd=tmp_path, check=True)
    return done.stdout.decode().split("\0")[:-1]


def test_hostile_values_round_trip_through_bash(tmp_path):
    recipe = mn5_attention_recipe(image=HOSTILE, env={"NCCL_MIN_NCHANNELS": "4; touch pwned3"})
    inputs = RunInputs(data_path=("1.0", "/data/with space/part $1"), tokenizer_model="/tok/o'el")
    resolved = resolve_row(recipe, recipe.rows[1], inputs)
    with pytest.raises(RecipeError, match="#SBATCH cannot carry"):
        sbatch_text(recipe, 2, resolved, tmp_path / "run dir")
    script = sbatch_text(recipe, 2, resolved, tmp_path / "run_dir")
    assert subprocess.run(["bash", "-n"], input=script.encode(), check=False).returncode == 0
    values = _bash_values(script, tmp_path)
    assert values == [HOSTILE, "4; touch pwned3", *resolved.argv]
    assert "--data-path" in resolved.argv and "/data/with space/part $1" in resolved.argv
    assert not list(tmp_path.glob("pwned*"))


def test_directive_values_that_sbatch_cannot_carry_are_refused():
    recipe = mn5_attention_recipe(account="my project")
    with pytest.raises(RecipeError, match="#SBATCH cannot carry"):
        sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]))
    recipe = mn5_attention_recipe(account="ehpc533", partition="acc", qos="acc_ehpc")
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]))
    for line in ("#SBATCH --account=ehpc533", "#SBATCH --partition=acc", "#SBATCH --qos=acc_ehpc"):
        assert line in script


def test_a_clusters_gpus_per_node_reaches_the_header_directive_and_torchrun():
    """A cluster of 1, 2 or 8 GPUs per node (every example has 4): the job asks SLURM for that many GPUs a node and
    starts that many ranks a node, so nodes x GPUs is the world size megatron was given, not nodes x 4."""
    gpus = random.choice([1, 2, 8])
    world_size = random.choice([16, 32])
    recipe = mn5_attention_recipe(gpus_per_node=gpus)
    row = dataclasses.replace(recipe.rows[0], nodes=world_size // gpus)
    recipe = dataclasses.replace(recipe, rows=(row, *recipe.rows[1:]))
    script = sbatch_text(recipe, 1, resolve_row(recipe, row))
    assert script.splitlines()[1].endswith(f", {world_size // gpus} nodes x {gpus} GPUs.")
    assert f"#SBATCH --nodes={world_size // gpus}\n" in script and f"#SBATCH --gpus-per-node={gpus}\n" in script
    assert f'torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {gpus} ' in script


def test_a_rows_own_time_limit_wins_over_the_clusters():
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml")
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, time="00:40:00"))
    scripts = [sbatch_text(recipe, number, resolve_row(recipe, row)) for number, row in enumerate(recipe.rows, 1)]
    assert "#SBATCH --time=00:40:00" in scripts[0] and "#SBATCH --time=01:20:00" in scripts[1]


def test_bad_environment_names_are_refused():
    with pytest.raises(RecipeError, match="environment variable name"):  # when the recipe is built, before any script
        mn5_attention_recipe(env={"BAD NAME": "1"})


def test_checkpoints_only_when_asked():
    recipe = mn5_attention_recipe()
    assert "--save" not in resolve_row(recipe, recipe.rows[0]).argv
    argv = resolve_row(recipe, recipe.rows[0], RunInputs(checkpoint_dir="/ckpt", save_interval=5)).argv
    assert argv[-6:] == ["--save", "/ckpt", "--load", "/ckpt", "--save-interval", "5"]
    with pytest.raises(RecipeError, match="--tokenizer-model"):
        resolve_row(recipe, recipe.rows[0], RunInputs(data_path=("/data/x",)))


def test_submit_without_sbatch_says_where_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RecipeError, match="sbatch not found"):
        submit("#!/bin/bash\n", tmp_path / "run")


def test_submit_without_sbatch_leaves_no_run_directory(tmp_path, monkeypatch, capsys):
    """``oellm recipe --submit`` on a machine without SLURM is refused before any run directory is created."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no sbatch anywhere on it
    image = tmp_path / "image.sif"
    image.touch()
    runs = tmp_path / f"runs-{random.randint(0, 10**6)}"
    status = main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--submit", "--row", "2",
                   "--account", "a", "--qos", "q", "--image", str(image), "--output-dir", str(runs)])
    assert status == 2
    assert "sbatch not found: submit from a SLURM login node" in capsys.readouterr().err
    assert not runs.exists()


def test_submit_writes_the_script_and_calls_sbatch(tmp_path, monkeypatch):
    fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 4242 from $1")
    out = submit("#!/bin/bash\necho hi\n", tmp_path / "run")
    assert out == f"Submitted batch job 4242 from {tmp_path / 'run' / 'job.sbatch'}"
    assert (tmp_path / "run" / "job.sbatch").read_text() == "#!/bin/bash\necho hi\n"


def test_environment_reaches_the_container_over_the_images_own(tmp_path):
    """A host export does not override a variable the image sets (the repository's image sets
    PYTORCH_CUDA_ALLOC_CONF); Apptainer gives APPTAINERENV_<NAME> precedence over the image."""
    recipe = mn5_attention_recipe(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512",
                                       "NCCL_MIN_NCHANNELS": "4; touch pwned"})
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    body = "\n".join(line for line in script.splitlines() if line.startswith("export "))
    program = body + '\nprintf "%s\\0" "$APPTAINERENV_PYTORCH_CUDA_ALLOC_CONF" "$APPTAINERENV_NCCL_MIN_NCHANNELS"\n'
    done = subprocess.run(["bash", "-c", program], capture_output=True, cwd=tmp_path, check=True)
    assert done.stdout.decode().split("\0")[:-1] == ["expandable_segments:True,max_split_size_mb:512",
                                                     "4; touch pwned"]
    assert not list(tmp_path.glob("pwned*"))


def test_resubmitting_keeps_the_previous_job_script(tmp_path, monkeypatch):
    fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 1 from $1")
    first = submit("#!/bin/bash\necho first\n", tmp_path / "run")
    second = submit("#!/bin/bash\necho second\n", tmp_path / "run")
    assert (tmp_path / "run" / "job.sbatch").read_text() == "#!/bin/bash\necho first\n"
    assert first.endswith("job.sbatch") and second.endswith("job-2.sbatch")
    assert (tmp_path / "run" / "job-2.sbatch").read_text() == "#!/bin/bash\necho second\n"


def test_the_srun_step_gets_the_cpus_of_the_job():
    """Since Slurm 22.05 srun does not inherit sbatch's --cpus-per-task: without its own, torchrun and every rank
    of a node share the step's default single CPU."""
    recipe = mn5_attention_recipe(cpus_per_task=72)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]))
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--cpus-per-task=72" in srun.split() and "#SBATCH --cpus-per-task=72" in script


def test_the_srun_step_exports_the_job_scripts_environment():
    """Under ``sbatch --export=NONE`` (a site's or a user's ``SBATCH_EXPORT=NONE``) the job holds
    ``SLURM_EXPORT_ENV=NONE``, which srun takes as its own ``--export``: without ``--export=ALL`` the step would start
    without the recipe's environment, ``MASTER_ADDR`` / ``MASTER_PORT`` and ``PYTHONPATH`` the script sets."""
    recipe = mn5_attention_recipe(cpus_per_task=random.choice([72, 80]))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]))
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--export=ALL" in srun.split()


def _sbatch_directives(script: str) -> list[str]:
    """The ``#SBATCH`` lines sbatch reads: those before the script's first line that is neither blank nor a
    comment (sbatch reads no directive after it)."""
    directives = []
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            directives.append(line)
    return directives


def test_a_requeued_job_appends_to_its_log():
    """A requeue keeps the job id, so its new start writes the same ``slurm-%j.out``; under SLURM's default
    (``JobFileAppend=0``) that truncated the log, and ``oellm table`` lost the earlier start's iterations."""
    recipe = mn5_attention_recipe(cpus_per_task=random.choice([72, 80]))
    directives = _sbatch_directives(sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0])))
    assert "#SBATCH --open-mode=append" in directives
    assert any(line.startswith("#SBATCH --output=") and line.endswith("/slurm-%j.out") for line in directives)


def test_host_paths_are_checked_before_submission(tmp_path):
    image = tmp_path / "image.sif"
    image.touch()
    check_host_paths(mn5_attention_recipe(image=str(image), binds=(f"{tmp_path}:/data",)).cluster)
    check_host_paths(mn5_attention_recipe(image="docker://nvcr.io/nvidia/pytorch:26.03-py3").cluster)
    with pytest.raises(RecipeError, match="bind source '/no/such/dir'"):
        check_host_paths(mn5_attention_recipe(image=str(image), binds=("/no/such/dir:/data",)).cluster)


def test_the_printed_script_says_how_to_create_its_log_directory(tmp_path):
    """SLURM opens ``--output`` before the script runs and creates no directory: the ``--dry-run`` script, sbatched
    by hand, lost its log (which ``oellm table`` reads) unless the run directory existed."""
    recipe = mn5_attention_recipe()
    directory = tmp_path / "runs" / "row01-4n"
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), directory)
    header = script.split("\n#SBATCH")[0]
    command = next(line for line in header.splitlines() if "mkdir -p" in line).lstrip("# ").split(" && ")[0]
    subprocess.run(["bash", "-c", command], check=True)
    output = next(line for line in script.splitlines() if line.startswith("#SBATCH --output="))
    assert Path(output.split("=", 1)[1]).parent == directory and directory.is_dir()


@pytest.mark.parametrize("name", ["runs_%u", "my runs"])
def test_a_run_directory_the_log_directive_cannot_carry_names_output_dir(tmp_path, capsys, name):
    """SLURM expands % in --output as a pattern (%u: the user), so the log went to a directory the script never
    created; a space was refused with no word of the option that sets the directory."""
    from megatron.oellm.cli import main

    config = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_attention.toml")
    assert main(["recipe", config, "--row", "1", "--output-dir", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert f"row 1: run directory '{tmp_path / name}" in err and "pass --output-dir DIR" in err
    assert main(["recipe", config, "--row", "1", "--output-dir", str(tmp_path / "runs")]) == 0
    assert f"#SBATCH --output={tmp_path / 'runs'}/" in capsys.readouterr().out
