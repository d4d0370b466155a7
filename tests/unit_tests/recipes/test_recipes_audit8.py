"""Recipe checks the mutation audit (round 8) of :mod:`megatron.oellm.recipes.resolve`,
:mod:`megatron.oellm.recipes.flag_names`, :mod:`megatron.oellm.recipes.timing` and
:mod:`megatron.oellm.recipes.megatron_validation` found unchecked."""

from __future__ import annotations

import dataclasses
import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row
from megatron.oellm.recipes.megatron_validation import megatron_refusal
from megatron.oellm.recipes.timing import START_UP_S, run_time

BASE = EXAMPLES / "qwen3_30b_a3b_mn5.toml"

TINY_MOE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--seq-length", "64", "--train-iters", "10", "--lr", "1e-4", "--mock-data", "--tokenizer-type",
            "NullTokenizer"]
"""A short mock-data run of the tiny Qwen3 MoE card that the entry's checks pass."""
MEGATRON_FSDP = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
                 "--ckpt-format", "fsdp_dtensor"]


def test_an_explicit_torch_backend_is_validated_as_the_torch_backend(tmp_path):
    """``--oellm-backend torch`` stays the torch backend while a row is checked (only ``auto`` resolves to the
    image's Transformer Engine): the torch-native experts' checkpoint saves under Megatron-FSDP, which stop the run
    at its first save, are refused before submission; the same run on Transformer Engine passes."""
    save = ["--save", str(tmp_path / "ckpt"), "--save-interval", str(random.randint(2, 9))]
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": str(random.choice([2, 4, 8]))}  # megatron refuses FSDP under 1
    refusal = megatron_refusal([*TINY_MOE, *MEGATRON_FSDP, *save, "--oellm-backend", "torch"], 1, env)
    assert refusal is not None and "--use-megatron-fsdp with --save" in refusal
    assert "qwen3-30b-a3b-tiny's torch-native MoE experts" in refusal
    assert megatron_refusal([*TINY_MOE, *MEGATRON_FSDP, *save, "--oellm-backend", "te"], 1, env) is None



def test_the_reports_step_time_comes_before_its_throughputs():
    """A report row gives its step time beside its tokens/s and TFLOP/s per GPU (rounded, so they imply slightly
    other step times): the time limit check uses the step time itself, and says so."""
    recipe = load_recipe(BASE)
    resolved = resolve_row(recipe, recipe.rows[0])
    step = round(random.uniform(5.0, 200.0), 1)
    tokens = round(random.uniform(1000.0, 9000.0))
    tflops = round(random.uniform(50.0, 400.0), 1)
    for reference in ({"step_time_s": step, "tokens_per_s_per_gpu": tokens, "tflops_per_gpu": tflops},
                      {"tflops_per_gpu_low": tflops, "tokens_per_s_per_gpu": tokens, "step_time_s": step}):
        row = dataclasses.replace(resolved.row, reference=reference)
        timing = run_time(row, "02:00:00", 10, resolved.world_size, resolved.built_card)
        assert (timing.step_s, timing.source) == (step, f"step_time_s {step}")
        assert timing.expected_s == pytest.approx(10 * step + START_UP_S)
    row = dataclasses.replace(resolved.row, reference={"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": tflops})
    timing = run_time(row, "02:00:00", 10, resolved.world_size, resolved.built_card)
    assert timing.source == f"tokens_per_s_per_gpu {tokens}"
    assert timing.step_s == pytest.approx(row.global_batch_size * resolved.card.seq_length
                                          / (tokens * resolved.world_size))



@pytest.mark.parametrize("name", ["save-interval", "persistent-save-interval"])
def test_a_zero_checkpoint_interval_without_save_is_no_refusal(name):
    """A recipe or row that sets its checkpoint interval to 0, as a number or as the string \"0\" (megatron saves
    nothing at interval 0), has nothing to save: it resolves without ``--save``; any other interval is refused."""
    recipe = load_recipe(BASE)
    row = recipe.rows[0]
    for zero in (0, "0"):
        resolved = resolve_row(recipe, dataclasses.replace(row, flags={**row.flags, name: zero}))
        assert resolved.flags[name] == zero and resolved.flags.get("save") in (None, False)
    interval = random.randint(1, 500)
    for value in (interval, str(interval)):
        with pytest.raises(RecipeError, match=f"--{name} {value!r} saves nothing without --save"):
            resolve_row(recipe, dataclasses.replace(row, flags={**row.flags, name: value}))


def test_a_spaced_string_for_a_flag_of_any_number_of_values_is_refused():
    """``spec = "module function"`` reaches Megatron as one ``--spec`` token, a module name with a space in it, for a
    flag of any number of values (``nargs='*'``) as for one of one or more: refused with the TOML array to write."""
    recipe = load_recipe(BASE)
    row = recipe.rows[0]
    module = random.choice(["megatron.core.models.gpt.gpt_layer_specs", "my_specs.layers"])
    function = random.choice(["get_gpt_layer_local_spec", "custom_spec"])
    with pytest.raises(RecipeError, match=rf"--spec = '{module} {function}' is one value, one argv token.*"
                                          rf'write the values as a TOML array: spec = \["{module}", "{function}"\] '
                                          r"\(in the row's flags\)"):
        resolve_row(recipe, dataclasses.replace(row, flags={**row.flags, "spec": f"{module} {function}"}))


def test_overriding_a_flag_the_layout_leaves_off_says_the_layout_leaves_it_unset():
    """A row flag turning on what its parallel layout leaves off (``sequence-parallel`` at sp = false) is refused
    with the layout named as leaving it unset, not as setting it to False."""
    recipe = load_recipe(BASE)
    row = recipe.rows[0]
    assert not resolve_row(recipe, row).layout.sp
    with pytest.raises(RecipeError, match=r"^--sequence-parallel True in the row's flags contradicts the parallel "
                                          r"layout \(\[parallel\], a row's parallel\), which leaves it unset; change "
                                          "it there"):
        resolve_row(recipe, dataclasses.replace(row, flags={**row.flags, "sequence-parallel": True}))
