"""A row whose reference gives TFLOP/s per GPU only: its step time comes from the FLOP count of
:mod:`megatron.oellm.flops`, whichever TFLOP/s key it gives; the high end of a range given alone was read as no
throughput at all, so the row's time limit went unchecked."""

from __future__ import annotations

import dataclasses
import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.recipes import load_recipe, resolve_row
from megatron.oellm.recipes.timing import START_UP_S, run_time


def _jupiter_row():
    """(row, world size, card) of the Qwen3-235B-A22B Jupiter recipe's first row."""
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    return resolved.row, resolved.world_size, resolved.built_card


@pytest.mark.parametrize("key", ["tflops_per_gpu", "tflops_per_gpu_low", "tflops_per_gpu_high"])
def test_a_tflops_only_reference_gives_the_step_from_the_flop_count(key):
    row, world_size, card = _jupiter_row()
    rng = random.Random()
    for _ in range(5):
        tflops, iterations = rng.uniform(50, 400), rng.randint(5, 40)
        timed = dataclasses.replace(row, reference={key: tflops})
        timing = run_time(timed, "09:00:00", iterations, world_size, card)
        flops = training_flops_per_token(card, card.seq_length, card.vocab_size).total
        step = row.global_batch_size * card.seq_length * flops / (tflops * 1e12 * world_size)
        assert timing.step_s == pytest.approx(step, rel=1e-12)
        assert timing.expected_s == pytest.approx(iterations * step + START_UP_S, rel=1e-12)
        assert timing.source == f"{key} {tflops:g}"


def test_the_low_end_still_wins_over_the_high_end():
    row, world_size, card = _jupiter_row()
    timed = dataclasses.replace(row, reference={"tflops_per_gpu_high": 175, "tflops_per_gpu_low": 170})
    assert run_time(timed, "02:00:00", 10, world_size, card).source == "tflops_per_gpu_low 170"


def test_a_high_end_only_row_that_outlasts_its_limit_is_refused(tmp_path, capsys):
    """At 150 TFLOP/s a step of the Jupiter row is ~32 s: 40 iterations + start-up outlast 20 minutes."""
    config = tmp_path / "high.toml"
    text = (EXAMPLES / "qwen3_235b_a22b_jupiter.toml").read_text()
    text = text.replace('extends = "_qwen3_235b_a22b_jupiter.toml"',
                        f'extends = "{EXAMPLES / "_qwen3_235b_a22b_jupiter.toml"}"')
    config.write_text(text.replace("reference = { tflops_per_gpu_low = 170, tflops_per_gpu_high = 175 }",
                                   'reference = { tflops_per_gpu_high = 150 }\ntrain_iters = 40\ntime = "00:20:00"', 1))
    assert main(["recipe", str(config), "--dry-run", "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert "row 1: the job would reach its time limit 00:20:00" in err and "tflops_per_gpu_high 150" in err
