"""The generated sbatch script run end to end under bash with stand-ins for ``scontrol``, ``srun``, ``apptainer``
and ``torchrun``: the node list it reads, where it runs, the image and binds Apptainer gets, the argv torchrun gets,
and its exit status."""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import shutil
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES
from sbatch_job_helpers import APPTAINER, RUNTIME_ENVIRONMENT, mn5_weak_recipe, run_job

import megatron.oellm
from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import CONTAINER_RUNTIMES
from megatron.oellm.recipes.slurm import run_dir

TORCHRUN_PROBE = """#!/bin/bash
printf 'probe %s\\n' "${OELLM_PROBE-<unset>}" >> "$FAKE_RECORD"
"""

TORCHRUN_CHECKPOINTS = """#!/bin/bash
# megatron's --load/--save in miniature: resume from the --load directory's latest iteration, train to
# --train-iters, save there in the --save directory
while [ $# -gt 0 ]; do
  case "$1" in
    --load) load="$2"; shift ;;
    --save) save="$2"; shift ;;
    --train-iters) iters="$2"; shift ;;
  esac
  shift
done
start=0
[ -f "$load/latest_checkpointed_iteration.txt" ] && start="$(cat "$load/latest_checkpointed_iteration.txt")"
printf 'trained %s iterations from %s in %s\\n' "$((iters - start))" "$start" "$save" >> "$FAKE_RECORD"
mkdir -p "$save" && echo "$iters" > "$save/latest_checkpointed_iteration.txt"
"""


def test_a_long_node_list_reaches_torchrun(tmp_path):
    """``scontrol show hostnames | head -n 1`` under ``set -o pipefail``: once the node list outgrew one pipe
    buffer, scontrol died of SIGPIPE after head's exit and the job ended before srun, every node idle."""
    nodes = random.randint(3000, 5000)
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    script = sbatch_text(recipe, 5, resolve_row(recipe, recipe.rows[4]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, nodes)
    assert status == 0, record
    torchrun = next(line for line in record if line.startswith("torchrun "))
    assert f"--nnodes {nodes} " in torchrun and "--rdzv-endpoint node1:29500 " in torchrun


def test_the_job_runs_where_the_script_was_made(tmp_path, monkeypatch):
    """The image (relative by default: megatron-oellm-0.2.0.dev0-hybridep.sif) and relative data paths were checked from
    the directory ``oellm recipe`` ran in, but the job read them from wherever ``sbatch`` was called: a script
    submitted by hand from its run directory stopped at start with the image not found."""
    made_in = tmp_path / "made here" / "it's"
    made_in.mkdir(parents=True)
    (made_in / "image.sif").touch()
    monkeypatch.chdir(made_in)
    recipe = mn5_weak_recipe(image="image.sif")
    resolved = resolve_row(recipe, recipe.rows[0])
    run = tmp_path / "run"
    run.mkdir()
    exit_status = random.randint(1, 120)
    status, record = run_job(sbatch_text(recipe, 1, resolved, run), tmp_path, run, 4, exit_status)
    assert status == exit_status, record  # torchrun's failure is the job's
    assert f"pwd {made_in}" in record
    assert f"bind {run}" in record
    torchrun = next(line for line in record if line.startswith("torchrun "))
    assert torchrun.endswith(" ".join(resolved.argv))


@pytest.mark.parametrize("separator", [":", ","])
def test_a_run_directory_apptainer_cannot_bind_names_output_dir(tmp_path, separator):
    """``--bind SRC`` reads ':' as SRC:DST and ',' as a list: a run directory with either passed every check and the
    job stopped at start in Apptainer, after its wait in the queue."""
    recipe = mn5_weak_recipe()
    resolved = resolve_row(recipe, recipe.rows[0])
    with pytest.raises(RecipeError, match=r"run directory .* container --bind \(Apptainer, Singularity\) cannot carry; pass --output-dir"):
        sbatch_text(recipe, 1, resolved, tmp_path / f"runs{separator}v2" / "row01-4n")
    sbatch_text(recipe, 1, resolved, tmp_path / "runs_v2" / "row01-4n")


def test_a_tilde_output_dir_is_the_home_directory(tmp_path, monkeypatch):
    """``--output-dir=~/runs`` (no shell expands ~ after '=') and ``output_dir = "~/runs"`` in a config made a
    directory named '~' under the current one, where nobody looked for the logs."""
    home = tmp_path / f"home{random.randint(0, 10**6)}"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert run_dir(mn5_weak_recipe(output_dir="~/runs"), 2) == home / "runs" / "qwen3_5_35b_a3b_mn5_weak" / "row02-8n"


def test_a_tilde_of_no_user_is_one_error_line(tmp_path, monkeypatch, capsys):
    """``--output-dir '~NAME/runs'`` for a NAME that is no user ended ``oellm recipe`` in a RuntimeError traceback."""
    monkeypatch.chdir(tmp_path)
    output_dir = f"~nouser{random.randint(0, 10**9)}/runs"
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--row", "1", "--output-dir",
                 output_dir]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oellm recipe: error: output directory {output_dir!r}") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_new_submission_measures_afresh_and_a_requeue_resumes(tmp_path):
    """``--save`` and ``--load`` were one ``<run dir>/checkpoints`` per row: a second submission of a row with
    ``--save-interval`` loaded the first job's final checkpoint, trained no iteration and logged no throughput for
    ``oellm table``. Each job now has its own directory: a requeue (same job id) resumes, a new job starts at 0."""
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    interval = random.randint(1, 4)
    run = tmp_path / "run"
    resolved = resolve_row(recipe, recipe.rows[0], RunInputs(checkpoint_dir=str(run / "checkpoints"),
                                                             save_interval=interval))
    script = sbatch_text(recipe, 1, resolved, run)
    iters = recipe.row_train_iters(recipe.rows[0])
    first, second = random.sample(range(1, 10**6), 2)

    def trained(job_id: int) -> str:
        status, record = run_job(script, tmp_path, tmp_path, 4, job_id=job_id, torchrun=TORCHRUN_CHECKPOINTS)
        assert status == 0, record
        return next(line for line in record if line.startswith("trained "))

    assert trained(first) == f"trained {iters} iterations from 0 in {run}/checkpoints/job-{first}"
    assert trained(second) == f"trained {iters} iterations from 0 in {run}/checkpoints/job-{second}"
    (run / "checkpoints" / f"job-{first}" / "latest_checkpointed_iteration.txt").write_text(str(interval))
    assert trained(first) == f"trained {iters - interval} iterations from {interval} in {run}/checkpoints/job-{first}"


def test_a_recipes_own_save_and_load_stand(tmp_path):
    """A row that sets ``save``, ``load`` and ``save-interval`` itself (a checkpoint to start from, a folder of its
    own) had both values swapped for the job's ``checkpoints/job-<id>``: the run started from nothing and saved
    elsewhere. Only the run directory's ``checkpoints`` folder that ``oellm recipe --save-interval`` gives is swapped."""
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    start, mine = tmp_path / "pretrained", tmp_path / "my checkpoints"
    done = random.randint(1, 5)
    start.mkdir()
    (start / "latest_checkpointed_iteration.txt").write_text(str(done))
    row = dataclasses.replace(recipe.rows[0], flags={**recipe.rows[0].flags, "save": str(mine), "load": str(start),
                                                     "save-interval": random.randint(1, 4)})
    recipe = dataclasses.replace(recipe, rows=(row, *recipe.rows[1:]))
    script = sbatch_text(recipe, 1, resolve_row(recipe, row), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, 2, torchrun=TORCHRUN_CHECKPOINTS)
    assert status == 0, record
    iters = recipe.row_train_iters(row)
    assert next(line for line in record if line.startswith("trained ")) == (
        f"trained {iters - done} iterations from {done} in {mine}")


def test_a_rows_own_start_checkpoint_stands_under_a_command_line_save_interval(tmp_path):
    """``oellm recipe --save-interval N`` replaced a row's own ``load`` (a converted checkpoint to start from) with
    the run directory's checkpoints: the job started from nothing. The row's folder now stands, and the job saves
    into its own ``checkpoints/job-<id>``."""
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    start = tmp_path / "converted start"
    done = random.randint(1, 5)
    start.mkdir()
    (start / "latest_checkpointed_iteration.txt").write_text(str(done))
    row = dataclasses.replace(recipe.rows[0], flags={**recipe.rows[0].flags, "load": str(start)})
    recipe = dataclasses.replace(recipe, rows=(row, *recipe.rows[1:]))
    run = tmp_path / "run"
    resolved = resolve_row(recipe, row, RunInputs(checkpoint_dir=str(run / "checkpoints"),
                                                  save_interval=random.randint(1, 4)))
    script = sbatch_text(recipe, 1, resolved, run)
    status, record = run_job(script, tmp_path, tmp_path, 2, torchrun=TORCHRUN_CHECKPOINTS)
    assert status == 0, record
    iters = recipe.row_train_iters(row)
    [trained] = [line for line in record if line.startswith("trained ")]
    assert trained.startswith(f"trained {iters - done} iterations from {done} in {run}/checkpoints/job-"), trained


@pytest.mark.parametrize("image_arch", ["none", "x86_64", "aarch64"])
def test_an_image_of_another_architecture_stops_the_job_before_srun(tmp_path, image_arch):
    """One image name served x86_64 MareNostrum 5 and aarch64 Jupiter: an image of the other architecture failed
    every rank with ``exec format error`` once srun had started them. The job now stops first, with one line."""
    node_arch = platform.machine()
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, 2, env={"FAKE_IMAGE_ARCH": image_arch})
    stderr = (tmp_path / "stderr").read_text()
    if image_arch == node_arch:
        assert status == 0 and any(line.startswith("torchrun ") for line in record), stderr
        return
    assert status == 1 and not any(line.startswith("torchrun ") for line in record), record
    (error,) = [line for line in stderr.splitlines() if line.startswith("error: ")]
    if image_arch == "none":  # no emulator: the exec itself fails, named with the runtime's own error
        assert f"apptainer exec of image {tmp_path / 'image.sif'} failed on node " in error
        assert "its last error line: FATAL: uname: exec format error;" in error and f"built for {node_arch}" in error
        return
    assert f"image {tmp_path / 'image.sif'} runs as {image_arch}" in error
    assert f"is {node_arch}: build the image for" in error


def test_a_node_without_apptainer_is_named_as_such(tmp_path):
    """Without apptainer on the node's PATH the architecture check read as an image to rebuild ("runs as none
    (apptainer exec failed)"); the job now names the missing command, before srun."""
    system_path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    if shutil.which("apptainer", path=system_path):
        pytest.skip("apptainer is installed on this machine")
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, 2)
    assert status == 0, record  # with the stand-in on PATH the job runs
    (tmp_path / "fake-bin" / "apptainer").unlink()
    env = {"PATH": f"{tmp_path / 'fake-bin'}{os.pathsep}{system_path}"}
    status, record = run_job(script, tmp_path, tmp_path, 2, env=env, stand_ins=("scontrol", "srun", "torchrun"))
    assert status == 1 and not any(line.startswith("torchrun ") for line in record), record
    (error,) = [line for line in (tmp_path / "stderr").read_text().splitlines() if line.startswith("error: ")]
    assert error.startswith("error: apptainer is not on the PATH of node ") and "module load apptainer" in error
    # under sbatch --export=NONE the submitting shell's PATH never reaches the job: the line says where to load it
    assert "--export=NONE or SBATCH_EXPORT=NONE the job starts from your login environment" in error


@pytest.mark.parametrize("host_variable", ["PYTHONPATH", "APPTAINERENV_PYTHONPATH", "SINGULARITYENV_PYTHONPATH"])
@pytest.mark.parametrize("image_python_path", ["", "/image/site:/image/te"])
def test_the_checkout_comes_first_on_the_images_own_python_path(tmp_path, image_python_path, host_variable):
    """The job must import the checkout's megatron.oellm (the code the dry run checked) and still reach the image's
    site paths; Apptainer drops a host PYTHONPATH when the image sets one (the checkout was lost), and passed the
    submitting shell's host paths into the container when it does not. A submitting shell's Singularity-era
    SINGULARITYENV_PYTHONPATH, which Apptainer still reads, replaced the image's value in the container."""
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    checkout = str(Path(megatron.oellm.__file__).resolve().parents[2])
    host_path = f"{checkout}:/host/site-{random.randint(1, 10**6)}"
    status, record = run_job(script, tmp_path, tmp_path, 1,
                             env={host_variable: host_path, "FAKE_IMAGE_PYTHONPATH": image_python_path})
    assert status == 0, (tmp_path / "stderr").read_text()
    expected = checkout + (f":{image_python_path}" if image_python_path else "")
    assert f"pythonpath {expected}" in record
    assert f"bind {checkout}" in record


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
def test_the_cluster_environment_reaches_the_container_of_either_runtime(tmp_path, runtime):
    """A site may provide Singularity instead of Apptainer: the job calls ``cluster.container_runtime`` and passes
    the cluster environment with that runtime's prefix, so it wins over the image's value; the other runtime is not
    on the node's PATH."""
    (tmp_path / "image.sif").touch()
    value = f"cluster-{random.randint(1, 10**6)}"
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), container_runtime=runtime, env={"OELLM_PROBE": value})
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    standin = RUNTIME_ENVIRONMENT.format(prefix=runtime.upper())
    system_path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    if any(shutil.which(other, path=system_path) for other in CONTAINER_RUNTIMES if other != runtime):
        pytest.skip("the other container runtime is installed on this machine")
    status, record = run_job(script, tmp_path, tmp_path, 2, torchrun=TORCHRUN_PROBE,
                             env={"PATH": f"{tmp_path / 'fake-bin'}{os.pathsep}{system_path}"},
                             stand_ins=("scontrol", "srun", runtime, "torchrun"), runtimes={runtime: standin})
    assert status == 0, (tmp_path / "stderr").read_text()
    assert record == [f"probe {value}"]


def test_a_node_without_the_configured_runtime_names_it_and_the_setting(tmp_path):
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), container_runtime="singularity")
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    system_path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    if shutil.which("singularity", path=system_path):
        pytest.skip("singularity is installed on this machine")
    status, record = run_job(script, tmp_path, tmp_path, 2, env={"PATH": f"{tmp_path / 'fake-bin'}{os.pathsep}"
                                                                          f"{system_path}"})
    assert status == 1 and record == [], record  # the Apptainer stand-in on PATH is not called
    (error,) = [line for line in (tmp_path / "stderr").read_text().splitlines() if line.startswith("error: ")]
    assert error.startswith("error: singularity is not on the PATH of node ") and "module load singularity" in error
    assert "cluster.container_runtime" in error


def test_an_unknown_container_runtime_is_refused_naming_the_choices():
    with pytest.raises(RecipeError, match=r"cluster.container_runtime must be one of apptainer, singularity, got "
                                          r"'docker'"):
        mn5_weak_recipe(container_runtime="docker")._check_values()


@pytest.mark.parametrize("relative", [False, True])
def test_a_missing_image_is_named_as_such_not_as_one_to_rebuild(tmp_path, monkeypatch, relative):
    """An image deleted or moved after the script was made (or a script submitted by hand, which no --submit check
    saw) read as an image of another architecture: "runs as none (apptainer exec failed) ... build the image for
    x86_64". The job now says the image is missing, before srun."""
    monkeypatch.chdir(tmp_path)
    name = f"image-{random.randint(0, 10**6)}.sif"
    recipe = mn5_weak_recipe(image=name if relative else str(tmp_path / name))
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    assert script.index("does not exist on node") < script.index('apptainer exec "$IMAGE" uname -m') < \
        script.index("srun ")
    status, record = run_job(script, tmp_path, tmp_path, 2)
    assert status == 1 and not any(line.startswith("torchrun ") for line in record), record
    (error,) = [line for line in (tmp_path / "stderr").read_text().splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: image {recipe.cluster.image} does not exist on node ") and "runs as" not in error
    assert f"(relative to {tmp_path})" in error and "pass --image" in error
    (tmp_path / name).touch()
    status, record = run_job(script, tmp_path, tmp_path, 2)
    assert status == 0 and any(line.startswith("torchrun ") for line in record), record


def test_an_image_uri_is_left_to_the_container_runtime(tmp_path):
    """``docker://``, ``oras://`` ... name no file here: the missing-image check must not refuse them."""
    uri = f"docker://registry.example/megatron-oellm:{random.randint(0, 10**6)}"
    recipe = mn5_weak_recipe(image=uri)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    uri_runtime = APPTAINER.replace('[ -f "$1" ] ||', '[[ "$1" == docker://* ]] ||')
    status, record = run_job(script, tmp_path, tmp_path, 2, runtimes={"apptainer": uri_runtime})
    assert status == 0 and any(line.startswith("torchrun ") for line in record), (tmp_path / "stderr").read_text()


@pytest.mark.parametrize("build", ["0", "1", None])
def test_a_single_node_hybrid_ep_image_stops_a_row_whose_group_spans_nodes_before_srun(tmp_path, build):
    """Every Jupiter row's HybridEP group spans nodes: in an image whose DeepEP was built for one node
    (``OELLM_HYBRID_EP_MULTINODE=0``) its 256 ranks built the model and failed or hung at the first dispatch. The
    job now stops before srun; a multi-node image, or one that does not say, runs."""
    (tmp_path / "image.sif").touch()
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, image=str(tmp_path / "image.sif")))
    row = recipe.rows[0]
    script = sbatch_text(recipe, 1, resolve_row(recipe, row), tmp_path / "run")
    env = {"FAKE_IMAGE_ARCH": platform.machine(), **({} if build is None else {"OELLM_HYBRID_EP_MULTINODE": build})}
    status, record = run_job(script, tmp_path, tmp_path, row.nodes, env=env)
    stderr = (tmp_path / "stderr").read_text()
    if build != "0":
        assert status == 0 and any(line.startswith("torchrun ") for line in record), stderr
        return
    assert status == 1 and not any(line.startswith("torchrun ") for line in record), record
    (error,) = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: image {tmp_path / 'image.sif'} was built with HYBRID_EP_MULTINODE=0")
    assert "HybridEP group of 16 GPUs spans 4 nodes" in error and "--build-arg HYBRID_EP_MULTINODE=1" in error


def test_a_row_whose_hybrid_ep_group_fits_a_node_has_no_build_check(tmp_path):
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    assert "OELLM_HYBRID_EP_MULTINODE" not in sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path)
