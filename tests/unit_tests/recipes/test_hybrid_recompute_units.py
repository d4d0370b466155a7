"""The Qwen3.5 recipes recompute the same units as the report's runs: its "full recompute (uniform, 1 layer)" ran a
GPTModel, whose layer is a mixer with its MoE, while the recipes build megatron-core's HybridModel, whose layers are
the pattern's symbols (``HybridStack.num_layers_per_pipeline_rank`` is its symbol count, and ``checkpointed_forward``
steps through it in units of ``recompute_num_layers``)."""

from __future__ import annotations

import pytest
from recipe_helpers import CONFIGS

from megatron.oellm.models.parallel import parse_pipeline_layout
from megatron.oellm.recipes import load_recipe, resolve_row

MIXERS, MOE = ("G", "*"), "E"
"""HybridModel pattern symbols of Qwen3.5: the GDN and attention mixers, and the MoE that follows each."""

QWEN3_5_RECIPES = [path for path in CONFIGS if load_recipe(path).model.startswith("qwen3.5-")]


def _units(chunk: str, size: int) -> list[str]:
    """The symbols of each recompute unit of one pipeline chunk, as megatron-core's uniform method cuts them."""
    return [chunk[start:start + size] for start in range(0, len(chunk), size)]


def test_there_are_qwen3_5_recipes():
    assert len(QWEN3_5_RECIPES) >= 4


@pytest.mark.parametrize("path", QWEN3_5_RECIPES, ids=lambda path: path.stem)
def test_each_recompute_unit_is_one_report_layer(path):
    """Every unit is one (mixer, MoE) pair, so each chunk stores as many checkpoints as the report's layout gives
    that chunk GPT layers; a unit of one symbol would store twice as many."""
    recipe = load_recipe(path)
    report_layers = [stage.count("decoder") for stage in parse_pipeline_layout(recipe.parallel.pipeline_layout)]
    for row in recipe.rows:
        flags = resolve_row(recipe, row).flags
        assert (flags["recompute-granularity"], flags["recompute-method"]) == ("full", "uniform")
        chunks = flags["hybrid-layer-pattern"].split("|")
        units = [_units(chunk, flags["recompute-num-layers"]) for chunk in chunks]
        for chunk_units in units:
            for unit in chunk_units:
                assert len(unit) == 2 and unit[0] in MIXERS and unit[1] == MOE, (row.label, unit)
        assert [len(chunk_units) for chunk_units in units] == report_layers
