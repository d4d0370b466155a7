"""``cluster.numa_binding``: a valid mode reaches torchrun's command line in the job script, no mode leaves the
command line as torchrun's default, and a mode torchrun does not know is refused before anything is queued."""

from __future__ import annotations

import random
import shlex
import subprocess

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe, resolve_row, sbatch_text
from megatron.oellm.recipes.config import NUMA_BINDINGS

ROW = "[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n"


def _script(tmp_path, cluster_lines: str) -> str:
    """The job script of one row of the Qwen3-30B-A3B recipe with ``cluster_lines`` in its ``[cluster]``."""
    config = tmp_path / "config.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "t"\n[cluster]\n{cluster_lines}'
                      f"\n{ROW}")
    recipe = load_recipe(config)
    return sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")


def _torchrun_words(script: str) -> list[str]:
    """The words of the job's torchrun command (its continuation lines joined), up to the entry module."""
    joined = script.replace("\\\n", " ")
    line = next(line for line in joined.splitlines() if "torchrun " in line)
    words = shlex.split(line)
    return words[words.index("torchrun"):words.index("-m")]


def test_a_mode_reaches_torchrun(tmp_path):
    mode = random.choice(NUMA_BINDINGS)
    script = _script(tmp_path, f'numa_binding = "{mode}"')
    words = _torchrun_words(script)
    assert words[words.index("--numa-binding") + 1] == mode
    assert subprocess.run(["bash", "-n"], input=script.encode(), check=False).returncode == 0


def test_no_mode_leaves_torchrun_unbound(tmp_path):
    words = _torchrun_words(_script(tmp_path, ""))
    assert "--numa-binding" not in words and "--nproc-per-node" in words and "--rdzv-endpoint" in words


@pytest.mark.parametrize("mode", ["numa", "Socket", "exclusive ", "core_complex"])
def test_an_unknown_mode_is_refused_before_queueing(tmp_path, capsys, mode):
    """torchrun refuses an unknown ``--numa-binding`` only when the job starts, after the queue."""
    config = tmp_path / "config.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "t"\n[cluster]\n'
                      f'numa_binding = "{mode}"\n{ROW}')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "cluster.numa_binding must be one of node, socket, exclusive, core-complex" in err
    assert repr(mode) in err and str(config) in err


def test_the_modes_are_torchruns_own():
    """The accepted modes are the choices of the installed torchrun's ``--numa-binding``."""
    from torch.distributed.run import get_args_parser

    action = next(a for a in get_args_parser()._actions if "--numa-binding" in a.option_strings)
    assert tuple(action.choices) == NUMA_BINDINGS
