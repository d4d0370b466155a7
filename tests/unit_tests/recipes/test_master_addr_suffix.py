"""``cluster.master_addr_suffix``: the rendezvous host was always the job's first host name as ``scontrol`` gives it,
and ``MASTER_ADDR`` cannot be set in ``[cluster.env]``; on JUWELS and JURECA that name is not the node's InfiniBand
interface (``<name>i`` is). The suffix is appended to the first host name; the Jupiter recipe leaves it empty."""

from __future__ import annotations

import random

import pytest
from recipe_helpers import EXAMPLES
from sbatch_job_helpers import mn5_weak_recipe, run_job

from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row, sbatch_text


@pytest.mark.parametrize("suffix", ["", "i", "-ib", ".ib0.example"])
def test_the_suffix_follows_the_first_host_name_in_the_rendezvous_endpoint(tmp_path, suffix):
    (tmp_path / "image.sif").touch()
    port = random.randint(20000, 40000)
    recipe = mn5_weak_recipe(image=str(tmp_path / "image.sif"), master_addr_suffix=suffix, master_port=port)
    script = sbatch_text(recipe, 1, resolve_row(recipe, recipe.rows[0]), tmp_path / "run")
    status, record = run_job(script, tmp_path, tmp_path, random.randint(2, 9))
    assert status == 0, (tmp_path / "stderr").read_text()
    (torchrun,) = [line for line in record if line.startswith("torchrun ")]
    assert f"--rdzv-endpoint node1{suffix}:{port} " in torchrun


def test_the_jupiter_recipe_uses_the_host_name_as_given():
    assert load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml").cluster.master_addr_suffix == ""


@pytest.mark.parametrize("suffix", ["i; touch pwned", "$(hostname)", "i b", '"i"', "i\n"])
def test_a_suffix_that_is_no_part_of_a_host_name_is_refused(suffix):
    with pytest.raises(RecipeError, match="cluster.master_addr_suffix .* is not part of a host name; use letters, "
                                          "digits, . and - only"):
        mn5_weak_recipe(master_addr_suffix=suffix)
