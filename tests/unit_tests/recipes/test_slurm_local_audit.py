"""Gaps a mutation audit of the SLURM job script, ``--local`` and ``oellm recipe`` found: the ranks per node
torchrun starts, a bind path with a space, the job log per job id, the job name per row, the header comment, and
an ``sbatch`` that refuses the job (CPU: ``scontrol``, ``srun``, ``apptainer``, ``torchrun`` and ``sbatch`` are
stand-ins)."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest
from recipe_helpers import EXAMPLES, fake_local_launch
from sbatch_job_helpers import mn5_weak_recipe, run_job

from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.submission import submit


def test_torchrun_starts_one_rank_per_gpu_of_the_node(tmp_path):
    """Every node's torchrun must start ``gpus_per_node`` ranks: with one rank per node the job's world size (and
    its layout, validated for nodes x GPUs) would not be the row's, and the job would stop at start or idle GPUs."""
    gpus = random.choice([2, 4, 8])
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), gpus_per_node=gpus)
    number = random.randint(2, 4)  # 8 to 32 nodes: at least the 16 GPUs the layout needs, with 2 per node
    row = recipe.rows[number - 1]
    script = sbatch_text(recipe, number, resolve_row(recipe, row), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, row.nodes)
    assert status == 0, (tmp_path / "stderr").read_text()
    torchrun = next(line for line in record if line.startswith("torchrun "))
    assert f"--nnodes {row.nodes} --nproc-per-node {gpus} " in torchrun


def test_an_input_directory_with_a_space_is_one_bind(tmp_path):
    """The directory of a ``--data-path`` prefix is bound into the container; a space in it (allowed: only ':' and
    ',' are refused) must stay one ``--bind`` value, else Apptainer gets two words and the data is not there."""
    (tmp_path / "image.sif").touch()
    data_dir = tmp_path / f"my corpus {random.randint(0, 999)}"
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"))
    inputs = RunInputs(data_path=(str(data_dir / "text_document"),), tokenizer_model="byte")
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0], inputs), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, 4)
    assert status == 0, (tmp_path / "stderr").read_text()
    binds = [line.removeprefix("bind ") for line in record if line.startswith("bind ")]
    assert str(data_dir) in binds
    assert str(tmp_path / "run") in binds


def test_each_job_logs_to_its_own_file_named_by_its_job_id(tmp_path):
    """``#SBATCH --output`` is ``<run dir>/slurm-%j.out``: a resubmitted row (a new job id) must not append to or
    overwrite the log of the job before it, whose throughput lines ``oellm table`` reads."""
    recipe = mn5_weak_recipe()
    number = random.randint(1, len(recipe.rows))
    directory = tmp_path / f"row{number:02d}"
    script = sbatch_text(recipe, number, resolve_row(recipe, recipe.rows[number - 1]), directory)
    assert f"#SBATCH --output={directory}/slurm-%j.out" in script.splitlines()


def test_the_job_name_and_header_name_the_row(tmp_path):
    """The job name (what ``squeue`` shows) carries the recipe and the row number, so that the jobs of one table are
    told apart; the header comment says the row's nodes and GPUs per node."""
    recipe = mn5_weak_recipe(gpus_per_node=random.choice([2, 4, 8]))
    number = random.randint(3, len(recipe.rows))  # 16 nodes or more: never the GPUs per node
    row = recipe.rows[number - 1]
    lines = sbatch_text(recipe, number, resolve_row(recipe, row), tmp_path / "run").splitlines()
    assert f"#SBATCH --job-name=oellm-{recipe.name}-r{number}" in lines
    assert f"#SBATCH --nodes={row.nodes}" in lines
    assert lines[1].endswith(f": row {number}, {row.nodes} nodes x {recipe.cluster.gpus_per_node} GPUs.")


def test_a_job_sbatch_refuses_is_an_error_naming_its_status_and_reason(tmp_path, monkeypatch):
    """An ``sbatch`` that exits non-zero (a bad account, a partition limit) submitted nothing: ``submit`` must raise
    with sbatch's exit status and its message, not report its empty output as the submission."""
    status = random.randint(1, 120)
    reason = f"sbatch: error: Invalid account or account/partition combination {random.randint(0, 999)}"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "{reason}" >&2\nexit {status}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RecipeError) as error:
        submit("#!/bin/bash\necho hi\n", tmp_path / "run")
    assert f"failed ({status}): {reason}; job.sbatch is removed, as nothing was queued" in str(error.value)


def test_a_local_fit_with_fewer_experts_than_the_top_k_routes_to_all_of_them(parse_megatron):
    """``[local] num_experts`` below the card's router top-k (8 for Qwen3.5-35B-A3B) must lower the top-k to the
    experts there are: megatron-core refuses a top-k above the expert count, so every rank would stop at start. An
    expert count above the top-k keeps the card's top-k."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.recipes.local import fit_local

    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    top_k = get_card(recipe.model).moe_router_topk
    for experts, expected in ((random.choice([2, 4]), None), (random.choice([16, 32]), top_k)):
        fitted = dataclasses.replace(recipe, local=dataclasses.replace(recipe.local, num_experts=experts))
        resolved = fit_local(fitted, recipe.rows[1], gpus=1)
        args = parse_megatron(resolved.argv)
        assert (args.num_experts, args.moe_router_topk) == (experts, expected or experts)
        assert resolved.card.moe_router_topk == (expected or experts)


@pytest.mark.parametrize("train_iters", [0, -1])
def test_a_local_run_of_no_iteration_is_refused_before_torchrun(monkeypatch, capsys, train_iters):
    """``--local --train-iters 0`` would start every rank to train nothing (and log no throughput): it is one
    error line naming the option and the value, exit status 2, and no torchrun."""
    from megatron.oellm.cli import main
    from megatron.oellm.commands import recipe as recipe_command

    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []
    fake_local_launch(monkeypatch, lambda *a, **k: calls.append(a))
    value = train_iters * random.randint(1, 50)
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1",
                 "--train-iters", str(value)]) == 2
    assert f"--train-iters must be positive, got {value}" in capsys.readouterr().err and not calls


def test_the_dry_run_table_and_row_give_the_gpus_and_the_micro_batches(tmp_path, capsys):
    """``--dry-run``'s row table gives each row's GPUs (nodes x GPUs per node), and the selected row's layout line
    its micro-batches per step: the global batch over micro-batch size x data-parallel size."""
    import re

    from megatron.oellm.cli import main

    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml")
    number = random.randint(1, len(recipe.rows))
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--row", str(number),
                 "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    gpus = recipe.cluster.gpus_per_node
    for index, row in enumerate(recipe.rows, start=1):
        assert re.search(rf"^ *{index}  +{row.nodes}  +{row.nodes * gpus}  +{row.global_batch_size}  +"
                         rf"{row.micro_batch_size}  ", out, re.MULTILINE), index
    row = recipe.rows[number - 1]
    layout = re.search(rf"-- row {number}: layout ok: .* on (\d+) GPUs, DP (\d+), (\d+) micro-batches per step", out)
    world, data_parallel, micro_batches = map(int, layout.groups())
    assert world == row.nodes * gpus
    assert micro_batches * row.micro_batch_size * data_parallel == row.global_batch_size
