"""``cluster.master_addr_suffix`` names the rendezvous host by another interface (JUWELS' ``<name>i``): torchrun then
found no node whose host name or addresses match the endpoint, so no node hosted the c10d store, every node waited
as a client, and the job hung at start. The job script now tells each ``srun`` task's torchrun whether it hosts the
store (``--rdzv-conf is_host=1`` on node 0, ``0`` elsewhere), from the task's own ``SLURM_NODEID``; without a suffix
torchrun's own matching stands and the command is as it was."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest
from sbatch_job_helpers import mn5_weak_recipe, run_job
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config
from torch.distributed.run import get_args_parser

from megatron.oellm.recipes import resolve_row, sbatch_text
from megatron.oellm.recipes import slurm as slurm_module

SRUN_PER_NODE = """#!/bin/bash
# one task per node, each with its own SLURM_NODEID, as srun --ntasks-per-node=1 starts them
while [[ "$1" == --* ]]; do shift; done
for ((node = 0; node < SLURM_NNODES; node++)); do SLURM_NODEID=$node SLURM_PROCID=$node "$@" || exit; done
"""
TORCHRUN_ARGV = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_TASKS/node-$SLURM_NODEID"
"""


def _torchrun_argv_per_node(tmp_path: Path, suffix: str, nodes: int, env: dict[str, str] | None = None
                            ) -> dict[int, list[str]]:
    """Run a weak-scaling row's job script on ``nodes`` stand-in nodes (the batch script itself, as under sbatch,
    with ``SLURM_NODEID`` 0) and return the argv each node's torchrun got."""
    (tmp_path / "image.sif").touch()
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), master_addr_suffix=suffix)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    status, _record = run_job(script, tmp_path, tmp_path, nodes, torchrun=TORCHRUN_ARGV,
                              runtimes={"srun": SRUN_PER_NODE},
                              env={"FAKE_TASKS": str(tasks), "SLURM_NODEID": "0", **(env or {})})
    assert status == 0, (tmp_path / "stderr").read_text()
    return {int(path.name.removeprefix("node-")): path.read_text().splitlines() for path in tasks.iterdir()}


def _rendezvous_config(argv: list[str]) -> dict[str, str]:
    """The rendezvous options torchrun's own parser reads from ``argv`` (its ``--rdzv-conf``)."""
    return _parse_rendezvous_config(get_args_parser().parse_args(argv).rdzv_conf)


def _is_host(config: dict[str, str]) -> bool | None:
    """``is_host`` as the c10d backend reads it; None when not given (torchrun then matches host names)."""
    return RendezvousParameters("c10d", "node1i:29500", "job", 1, 1, **config).get_as_bool("is_host")


@pytest.mark.parametrize("installed", [False, True])
@pytest.mark.parametrize("suffix", ["i", "-ib"])
def test_only_the_first_node_hosts_the_store(tmp_path, monkeypatch, suffix, installed):
    if installed:  # no checkout wrapper before torchrun's
        monkeypatch.setattr(slurm_module, "source_checkout", lambda: None)
    nodes = random.randint(2, 6)
    argv = _torchrun_argv_per_node(tmp_path, suffix, nodes)
    assert sorted(argv) == list(range(nodes))
    for node, words in argv.items():
        assert f"node1{suffix}:29500" in words
        assert words.count("--rdzv-conf") == 1
        assert _is_host(_rendezvous_config(words)) is (node == 0), (node, words)


def test_a_rendezvous_config_from_the_environment_is_kept(tmp_path):
    """torchrun reads ``--rdzv-conf`` from ``PET_RDZV_CONF`` too, and an option given replaces it: merged."""
    timeout = random.randint(100, 2000)
    argv = _torchrun_argv_per_node(tmp_path, "i", 2, env={"PET_RDZV_CONF": f"join_timeout={timeout}"})
    for node, words in argv.items():
        config = _rendezvous_config(words)
        assert config["join_timeout"] == str(timeout)
        assert _is_host(config) is (node == 0)


def test_without_a_suffix_torchrun_matches_host_names_itself(tmp_path):
    argv = _torchrun_argv_per_node(tmp_path, "", 2)
    for words in argv.values():
        assert "--rdzv-conf" not in words and "node1:29500" in words
        assert _is_host(_rendezvous_config(words)) is None
    recipe = mn5_weak_recipe()
    assert "is_host" not in sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")


def test_a_task_without_slurm_nodeid_names_the_rendezvous_shell_not_torchrun(tmp_path):
    """The line run outside ``srun`` (no ``SLURM_NODEID``) stops with its own name on the error, so it is not read as
    a complaint of torchrun's, and torchrun never starts."""
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), master_addr_suffix="i")
    [line] = [line for line in sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
              .splitlines() if "is_host" in line]
    started = tmp_path / "started"
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(f"#!/bin/bash\ntouch {started}\n")
    torchrun.chmod(0o755)
    command = line.strip().removesuffix("\\") + f" {torchrun} --nnodes {random.randint(2, 64)}"
    env = {key: value for key, value in os.environ.items() if key != "SLURM_NODEID"}
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, check=False)
    assert done.returncode != 0 and not started.exists()
    assert done.stderr.startswith("oellm-rendezvous-host: ") and "SLURM_NODEID" in done.stderr, done.stderr
    assert "torchrun" not in done.stderr
