"""The UCC pipeline backend and ``CUDA_DEVICE_MAX_CONNECTIONS``: megatron-core 0.19.2 asserts a value other than 1
when it builds the pipeline groups with UCC, and 1 with TP or CP > 1 (without FSDP or EP overlap), so a row that
breaks either would only fail after its job left the queue; ``--dry-run`` refuses it."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"  # tp=1, pp=4, cp=1; MN5's env sets CUDA_DEVICE_MAX_CONNECTIONS=8


def _ucc_recipe(tmp_path, connections: str | None = None, tp: int = 1):
    """The Qwen3-30B-A3B MN5 recipe with the UCC pipeline backend, ``tp`` and the cluster's connection setting."""
    env = f'\n[cluster.env]\nCUDA_DEVICE_MAX_CONNECTIONS = "{connections}"\n' if connections else ""
    config = tmp_path / "ucc.toml"
    config.write_text(f'extends = "{BASE}"\n[megatron_flags]\npipeline-model-parallel-comm-backend = "ucc"\n'
                      f"[parallel]\ntp = {tp}\nsp = {str(tp > 1).lower()}\n{env}")
    return config


def test_ucc_with_one_device_connection_is_refused_naming_the_setting(tmp_path):
    recipe = load_recipe(_ucc_recipe(tmp_path, "1"))
    with pytest.raises(RecipeError, match=r"ucc needs CUDA_DEVICE_MAX_CONNECTIONS unset or other than 1.*sets '1'"):
        resolve_row(recipe, recipe.rows[0])


def test_ucc_with_more_connections_resolves(tmp_path):
    connections = str(random.randint(2, 32))
    recipe = load_recipe(_ucc_recipe(tmp_path, connections))
    resolved = resolve_row(recipe, recipe.rows[0])
    assert recipe.row_env(recipe.rows[0])["CUDA_DEVICE_MAX_CONNECTIONS"] == connections
    assert resolved.argv[resolved.argv.index("--pipeline-model-parallel-comm-backend") + 1] == "ucc"


def test_ucc_beside_tensor_parallelism_is_refused_whatever_the_setting(tmp_path, capsys):
    """TP 2 needs the value 1, UCC another one: no setting passes, so the message names the ways out."""
    for connections in ("1", "8"):
        assert main(["recipe", str(_ucc_recipe(tmp_path, connections, tp=2)), "--dry-run", "--row", "1"]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1, err
        assert "ucc with tp=2, cp=1" in err and "--overlap-moe-expert-parallel-comm" in err, err
