"""Each MN5 recipe's row 1 as ``oellm recipe --local`` runs it on one GPU (mock data; on a machine without Transformer
Engine, the torch-native backend) passes every check of the training entry up to megatron's ``pretrain``, megatron's
own argument validation included, with the GPU queries answered as an H100's. The entry's checks are tested one by one
with megatron's validation stubbed; this runs them together on the command lines the GPU acceptance's train and
interrupt stages start, so that a new refusal of a shipped row is seen on CPU (session 49: the torch backend's
``--attention-backend`` refusal would have stopped every MN5 row's ``--local`` run had ``--local`` not turned the rows'
``flash`` into ``auto``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from megatron.oellm.recipes.local import fit_local, local_environment
from megatron.oellm.recipes.toml_loading import load_recipe

ROOT = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).with_name("entry_on_faked_hopper.py")
RECIPES = ["qwen3_30b_a3b_mn5", "qwen3_5_35b_a3b_mn5_strong", "qwen3_5_35b_a3b_mn5_weak",
           "qwen3_5_35b_a3b_mn5_attention", "qwen3_5_35b_a3b_mn5_routing"]


@pytest.mark.parametrize("name", RECIPES)
def test_row_1_reaches_pretrain(name: str, tmp_path: Path) -> None:
    recipe = load_recipe(ROOT / "examples" / "oellm" / f"{name}.toml")
    row = recipe.rows[0]
    resolved = fit_local(recipe, row, gpus=1)
    env = {**os.environ, **local_environment(recipe, row), "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-W", "ignore", str(DRIVER), *resolved.argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "REACHED pretrain" in done.stdout, output[-3000:]
