"""The Jupiter ModelZoo row pads the vocabulary as the Megatron-MoE-ModelZoo Qwen3-235B-A22B config does
(``--make-vocab-size-divisible-by 1187``: 151,936 rows at TP2, the tokenizer's own size); the other rows keep
megatron's default (128 per TP rank: 152,064)."""

from __future__ import annotations

from recipe_helpers import EXAMPLES

from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.recipes import load_recipe, resolve_row


def test_the_modelzoo_row_pads_as_the_modelzoo():
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    padded = {}
    for number, row in enumerate(recipe.rows, start=1):
        resolved = resolve_row(recipe, row)
        divisor = resolved.flags.get("make-vocab-size-divisible-by")
        padded[number] = megatron_padded_vocab(resolved.flags["vocab-size"], resolved.layout.tp, divisor)
    assert "ModelZoo" in recipe.rows[1].label
    assert padded == {1: 152064, 2: 151936, 3: 152064}
