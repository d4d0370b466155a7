"""The Qwen3.5 recipes recompute the same units as the report's runs. The recipes build megatron-core's HybridModel,
whose layers are the pattern's symbols (``HybridStack.num_layers_per_pipeline_rank`` is its symbol count, and
``checkpointed_forward`` steps through it in units of ``recompute_num_layers``). ibaucells' "full recompute (uniform,
1 layer)" ran a GPTModel, whose layer is a mixer with its MoE: a unit of two symbols. kpoeppel's runs, whose points
the routing recipe's rows 3-5 take, were a HybridModel (the report says so) with the same words: one symbol."""

from __future__ import annotations

import pytest
from recipe_helpers import CONFIGS

from megatron.oellm.models.parallel import parse_pipeline_layout
from megatron.oellm.recipes import load_recipe, resolve_row

MIXERS, MOE = ("G", "*"), "E"
"""HybridModel pattern symbols of Qwen3.5: the GDN and attention mixers, and the MoE that follows each."""

QWEN3_5_RECIPES = [path for path in CONFIGS if load_recipe(path).model.startswith("qwen3.5-")]
HYBRID_MODEL_ROWS = {"qwen3_5_35b_a3b_mn5_routing": (3, 4, 5)}
"""Rows (1-based) at the points of kpoeppel's HybridModel runs, whose "1 layer" is one pattern symbol."""


def _units(chunk: str, size: int) -> list[str]:
    """The symbols of each recompute unit of one pipeline chunk, as megatron-core's uniform method cuts them."""
    return [chunk[start:start + size] for start in range(0, len(chunk), size)]


def test_there_are_qwen3_5_recipes():
    assert len(QWEN3_5_RECIPES) >= 4


@pytest.mark.parametrize("path", QWEN3_5_RECIPES, ids=lambda path: path.stem)
def test_each_recompute_unit_is_one_report_layer(path):
    """Every unit is one layer of the run the row reproduces: a (mixer, MoE) pair where the report ran a GPTModel,
    so each chunk stores as many checkpoints as the report's layout gives that chunk GPT layers; one symbol where
    it ran a HybridModel, twice as many."""
    recipe = load_recipe(path)
    report_layers = [stage.count("decoder") for stage in parse_pipeline_layout(recipe.parallel.pipeline_layout)]
    for number, row in enumerate(recipe.rows, start=1):
        flags = resolve_row(recipe, row).flags
        assert (flags["recompute-granularity"], flags["recompute-method"]) == ("full", "uniform")
        hybrid_model_run = number in HYBRID_MODEL_ROWS.get(path.stem, ())
        assert flags["recompute-num-layers"] == (1 if hybrid_model_run else 2), row.label
        chunks = flags["hybrid-layer-pattern"].split("|")
        units = [_units(chunk, flags["recompute-num-layers"]) for chunk in chunks]
        for chunk_units in units:
            for unit in chunk_units:
                if hybrid_model_run:
                    assert len(unit) == 1 and unit in (*MIXERS, MOE), (row.label, unit)
                else:
                    assert len(unit) == 2 and unit[0] in MIXERS and unit[1] == MOE, (row.label, unit)
        per_layer = 2 if hybrid_model_run else 1
        assert [len(chunk_units) for chunk_units in units] == [per_layer * layers for layers in report_layers]
