"""Every recipe row's log passes ``oellm table``'s world-size product check with the values megatron-core 0.19.2's
``validate_args`` prints (``world_size``, ``data_parallel_size = world / (TP x PP x CP)``, ``gtp_weight_remat_size
1``), and a wrong ``world_size`` is refused. The test logs' arguments lacked both sizes, so the check was never run
on the recipes' real layouts. Fresh random throughputs and wrong sizes."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.recipes import Recipe, RecipeError, TableRow, load_recipe, resolve_row
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import EXAMPLES, megatron_args, megatron_log


def _resolves(recipe: Recipe, row: TableRow) -> bool:
    """``oellm recipe`` resolves the row (it refuses some by design, e.g. the CKDA recipe's document-masked rows)."""
    try:
        resolve_row(recipe, row)
    except RecipeError:
        return False
    return True


RECIPE_ROWS = [(path.stem, number, row.nodes, recipe.cluster.gpus_per_node)
               for path in sorted(EXAMPLES.glob("[a-z]*.toml")) for recipe in [load_recipe(path)]
               for number, row in enumerate(recipe.rows, 1) if _resolves(recipe, row)]
"""(recipe, 1-based row number, nodes, GPUs per node) of every row of every example recipe that can run."""


def _text(args: dict) -> str:
    """A log of ``args`` whose step time gives a plausible 500-2000 tokens/s/GPU (an MFU well below 100 %)."""
    tokens = random.uniform(500, 2000)
    step_ms = round(args["global_batch_size"] * args["seq_length"] / tokens / args["world_size"] * 1000, 1)
    return megatron_log(args, [step_ms] * 10, [150.0] * 10)


@pytest.mark.parametrize("stem, number, nodes, gpus_per_node", RECIPE_ROWS)
def test_a_recipe_rows_log_passes_the_product_check(stem, number, nodes, gpus_per_node):
    args = megatron_args(stem, number)
    model = args["tensor_model_parallel_size"] * args["pipeline_model_parallel_size"] * args["context_parallel_size"]
    assert args["world_size"] == nodes * gpus_per_node
    assert args["data_parallel_size"] * model == args["world_size"] and args["gtp_weight_remat_size"] == 1
    row = summarise(parse_log_text(_text(args), f"{stem}-{number}.out"), Window(), gpus_per_node)
    assert row.ok, row.status
    assert row.gpus == nodes * gpus_per_node and row.nodes == nodes


@pytest.mark.parametrize("stem, number, nodes, gpus_per_node", RECIPE_ROWS)
def test_a_wrong_world_size_is_refused(stem, number, nodes, gpus_per_node):
    """Whole nodes more or fewer than the row's: only the product of the parallel sizes shows it."""
    args = megatron_args(stem, number)
    world = args["world_size"]
    wrong = random.choice([n for n in range(1, 4 * nodes + 2) if n != nodes]) * gpus_per_node
    sizes = " x ".join(f"{name} {args[name]}" for name in ("tensor_model_parallel_size",
                                                          "pipeline_model_parallel_size", "context_parallel_size",
                                                          "data_parallel_size"))
    row = summarise(parse_log_text(_text({**args, "world_size": wrong})), Window(), gpus_per_node)
    assert row.status == (f"implausible arguments: world_size {wrong} is not {sizes} = {world} (a value cut by "
                          "another rank's output?)")
    assert row.tokens_per_s_per_gpu is None


def test_a_given_world_size_sets_the_data_parallel_size():
    """An override of ``world_size`` (a row's log at another node count) gets its own data-parallel size; one that
    no layout divides gets none, as megatron would not have started."""
    stem, number, _, gpus_per_node = random.choice(RECIPE_ROWS)
    args = megatron_args(stem, number)
    model = args["world_size"] // args["data_parallel_size"]
    nodes = random.randint(1, 64)
    world = nodes * gpus_per_node * model
    assert megatron_args(stem, number, {"world_size": world})["data_parallel_size"] == world // model
    if model > 1:
        assert "data_parallel_size" not in megatron_args(stem, number, {"world_size": model * nodes + 1})
