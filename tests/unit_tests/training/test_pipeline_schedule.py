"""The interleaved pipeline schedule's micro-batch rules, checked before init, against megatron-core's own schedule."""

from __future__ import annotations

import argparse
import random
import types
from pathlib import Path

import pytest

from megatron.oellm.training.pipeline_schedule import check_interleaved_microbatches, interleaved_schedule_refusal
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, parsed_with_padded_vocab
from tests.unit_tests.training.pipeline_schedule_helpers import interleaved_args, upstream_refusal


def test_the_rule_refuses_exactly_what_megatron_cores_schedule_refuses():
    """Every micro-batch count up to 40 at pipeline sizes 2-8, with the default group (the pipeline size) and a few
    random larger groups: our predicate and megatron-core's schedule agree on which ones run."""
    cases = [(m, p, p) for p in range(2, 9) for m in range(1, 41)]
    cases += [(m, p, random.randint(p, 3 * p)) for p in (2, 4, 8) for m in random.sample(range(1, 49), 12)]
    refused = 0
    for microbatches, pipeline, group in cases:
        ours = interleaved_schedule_refusal(microbatches, pipeline, group)
        upstream = upstream_refusal(microbatches, pipeline, group)
        assert (ours is None) == (upstream is None), (microbatches, pipeline, group, ours, upstream)
        refused += ours is not None
    assert 0 < refused < len(cases)


def test_a_global_batch_the_interleaved_schedule_cannot_run_is_refused_in_one_line():
    """PP 4 with virtual stages, DP 4, MBS 1: GBS 24 gives 6 micro-batches (a last group of 2 < 4), GBS 8 gives 2
    (fewer than the pipeline size); GBS 64 (16) runs, as does GBS 24 without virtual stages."""
    check_interleaved_microbatches(interleaved_args())
    check_interleaved_microbatches(interleaved_args(global_batch_size=24, virtual_pipeline_model_parallel_size=None))
    with pytest.raises(ValueError, match=r"global batch 24 / \(micro batch 1 x data-parallel size 4\) = 6 "
                                         r"micro-batches per step, and the 6 micro-batches per step leave a last "
                                         r"group of 2") as refused:
        check_interleaved_microbatches(interleaved_args(global_batch_size=24))
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=r"must lie between the pipeline size \(4\) and the micro-batches per "
                                         r"step \(2\)"):
        check_interleaved_microbatches(interleaved_args(global_batch_size=8))


def test_every_size_of_a_step_batch_size_schedule_is_checked():
    """A schedule ramping 16 -> 24 -> 64 samples: its 24 (6 micro-batches) is refused though the final size runs."""
    with pytest.raises(ValueError, match="global batch 24 "):
        check_interleaved_microbatches(interleaved_args(step_batch_size_schedule="0:16 1000:24 5000:64"))
    check_interleaved_microbatches(interleaved_args(step_batch_size_schedule="0:16 1000:32 5000:64"))


def test_a_larger_micro_batch_group_and_the_rounded_batch_are_what_megatron_runs():
    """``--microbatch-group-size-per-virtual-pipeline-stage 6`` runs 6 micro-batches at PP 4; under
    ``--decrease-batch-size-if-needed`` GBS 27 is rounded down to 24 before the count."""
    check_interleaved_microbatches(interleaved_args(global_batch_size=24, microbatch_group_size_per_vp_stage=6))
    with pytest.raises(ValueError, match="global batch 24 "):
        check_interleaved_microbatches(interleaved_args(global_batch_size=27, decrease_batch_size_if_needed=True))


def test_an_evaluation_batch_the_interleaved_schedule_cannot_run_is_refused_when_the_run_evaluates():
    """megatron's ``evaluate`` runs ``--eval-global-batch-size`` / (``--eval-micro-batch-size`` x data-parallel size)
    micro-batches through the same interleaved schedule at the first evaluation; the training batch is checked
    alone before. PP 4 x VPP 2, DP 4: an evaluation batch of 8 (2 micro-batches) or 40 (10: a last group of 2) is
    refused, 16 or 64 runs, and a run that never evaluates (``--eval-iters 0``) is left alone."""
    import inspect

    from megatron.training import training

    assert ("eval_num_microbatches = eval_batch_size // (\n        eval_micro_batch_size * args.data_parallel_size * "
            "args.gtp_weight_remat_size") in inspect.getsource(training.evaluate)
    for eval_batch, microbatches in ((8, 2), (40, 10)):
        assert upstream_refusal(microbatches, 4, 4) is not None
        refused = interleaved_args(eval_global_batch_size=eval_batch)
        with pytest.raises(ValueError, match=rf"would stop at the first evaluation: --eval-global-batch-size "
                                             rf"{eval_batch} / \(--eval-micro-batch-size 1 x data-parallel size 4\) "
                                             rf"= {microbatches} micro-batches per step"):
            check_interleaved_microbatches(refused)
        check_interleaved_microbatches(interleaved_args(eval_global_batch_size=eval_batch, eval_iters=0))
    assert upstream_refusal(16, 4, 4) is None
    check_interleaved_microbatches(interleaved_args(eval_global_batch_size=16))
    check_interleaved_microbatches(interleaved_args(eval_global_batch_size=64, full_validation=True))
    micro = random.choice([2, 4])  # 64 / (micro x 4): 8 or 4 micro-batches, both run
    check_interleaved_microbatches(interleaved_args(eval_micro_batch_size=micro))
    with pytest.raises(ValueError, match=r"--eval-micro-batch-size 8 x data-parallel size 4\) = 2 micro-batches"):
        check_interleaved_microbatches(interleaved_args(eval_micro_batch_size=8, full_validation=True, eval_iters=0))


def test_the_recipe_check_refuses_such_a_row_before_submission():
    """``--dry-run`` / ``--submit`` run the entry's check on the row's validated arguments: a Qwen3.5 MN5 row at
    PP 4 x VPP 2 whose batch gives 6 micro-batches per step is refused there, not at the job's first step."""
    from dataclasses import replace

    from megatron.oellm.recipes.megatron_validation import validate_on_cluster
    from megatron.oellm.recipes.resolve import resolve_row
    from megatron.oellm.recipes.toml_loading import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[3] / "examples/oellm/qwen3_5_35b_a3b_mn5_strong.toml")
    row = recipe.rows[0]
    resolved = resolve_row(recipe, row)
    assert resolved.layout.pp > 1 and resolved.layout.pp * 2 > 4  # interleaved, more than 4 stages
    data_parallel = resolved.world_size // (resolved.layout.tp * resolved.layout.pp * resolved.layout.cp)
    bad_batch = row.micro_batch_size * data_parallel * (resolved.layout.pp + 2)  # a last group of 2 < PP
    bad = resolve_row(recipe, replace(row, global_batch_size=bad_batch))
    validate_on_cluster(resolved.argv, resolved.world_size, recipe.row_env(row))
    with pytest.raises(ValueError, match="interleaved pipeline schedule"):
        validate_on_cluster(bad.argv, bad.world_size, recipe.row_env(row))


def test_the_training_entry_refuses_it_before_megatron_initialises(monkeypatch, capsys):
    """The entry runs the check on the validated arguments: one ``error:`` line, exit status 2, before ``pretrain``
    (here PP 2 with a 4-stage layout, DP 1, GBS 3: a last group of 1 micro-batch)."""
    import megatron.training.arguments

    entry = entry_up_to_pretrain(monkeypatch)

    def validated(**kwargs):
        args = parsed_with_padded_vocab(**kwargs)
        args.data_parallel_size = 1  # what validate_args derives for one node of PP 2 (it needs CUDA here)
        args.virtual_pipeline_model_parallel_size = 2  # what validate_args derives from the 4-stage layout
        return args

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", validated)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "128",
            "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Et|t||L",
            "--micro-batch-size", "1"]
    assert entry.main([*argv, "--global-batch-size", "3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "interleaved pipeline schedule" in err[0] and "last group of 1" in err[0], err
    with pytest.raises(Reached):
        entry.main([*argv, "--global-batch-size", "4"])


def _megatrons_microbatches(args: types.SimpleNamespace) -> int:
    """Micro-batches per step as megatron's ``global_vars`` builds its calculator: the global batch over micro batch
    x ``data_parallel_size * gtp_weight_remat_size``."""
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    return ConstantNumMicroBatchesCalculator(args.global_batch_size, args.micro_batch_size,
                                             args.data_parallel_size * args.gtp_weight_remat_size,
                                             args.decrease_batch_size_if_needed, rank=0).get()


def test_weight_shard_replicas_divide_the_batch_as_in_megatrons_calculator():
    """With ``--tensor-parallel-num-weight-shards`` megatron's ``data_parallel_size`` leaves out the weight-shard
    replicas, yet its calculator divides the batch by them too. The check counted ``remat`` times the micro-batches:
    PP 4, DP 2 x 2, GBS 8 (2 micro-batches, which megatron's schedule refuses) passed, and PP 2 with groups of 3,
    GBS 20 (5 micro-batches: 3 + 2, which it runs) was refused as 10 (a last group of 1)."""
    remat = random.choice([2, 4])
    short = interleaved_args(data_parallel_size=2, gtp_weight_remat_size=remat, global_batch_size=2 * remat * 2)
    assert _megatrons_microbatches(short) == 2
    assert upstream_refusal(2, 4, 4) is not None
    with pytest.raises(ValueError, match=rf"micro batch 1 x data-parallel size {2 * remat}: 2 x {remat} weight-shard "
                                         r"replicas .*\) = 2 micro-batches per step"):
        check_interleaved_microbatches(short)
    runs = interleaved_args(pipeline_model_parallel_size=2, microbatch_group_size_per_vp_stage=3, data_parallel_size=2,
                 gtp_weight_remat_size=remat, global_batch_size=2 * remat * 5)
    assert _megatrons_microbatches(runs) == 5 and upstream_refusal(5, 2, 3) is None
    check_interleaved_microbatches(runs)


def test_the_training_batch_check_refuses_exactly_what_megatrons_calculator_refuses():
    """validate_args checks only the evaluation batch, which passes where the command line gives evaluation sizes of
    their own; megatron-core's micro-batch calculator then stopped every rank at start-up on the training batch. The
    entry's check refuses exactly the batches that calculator refuses (run here on fresh random sizes), and its
    suggestion is one the calculator takes."""
    import re

    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    from megatron.oellm.training.pipeline_schedule import check_training_batch

    for _ in range(200):
        micro, data_parallel = random.randint(1, 8), random.choice([1, 2, 3, 4, 8])
        batch, decrease = random.randint(1, 120), random.random() < 0.3
        args = argparse.Namespace(global_batch_size=batch, micro_batch_size=micro, data_parallel_size=data_parallel,
                                  decrease_batch_size_if_needed=decrease, step_batch_size_schedule=None)
        try:
            ConstantNumMicroBatchesCalculator(batch, micro, data_parallel, decrease, rank=1)
            megatron_refuses = False
        except AssertionError:
            megatron_refuses = True
        if not megatron_refuses:
            check_training_batch(args)
            continue
        relation = "is below" if decrease else "is not a multiple of"
        with pytest.raises(ValueError, match=f"--global-batch-size {batch} {relation} --micro-batch-size {micro} x "
                                             f"data-parallel size {data_parallel} = {micro * data_parallel}: ") as error:
            check_training_batch(args)
        suggested = re.search(r"(?:e\.g\. |at least )(\d+)", str(error.value)).group(1)
        ConstantNumMicroBatchesCalculator(int(suggested), micro, data_parallel, decrease, rank=1)


def test_the_training_batch_check_leaves_a_step_schedule_to_megatron():
    """megatron-core checks a --step-batch-size-schedule's current size at run time, by design (a run may grow its GPU
    count between sizes): the check leaves it, whatever --global-batch-size says."""
    from megatron.oellm.training.pipeline_schedule import check_training_batch

    check_training_batch(argparse.Namespace(global_batch_size=7, micro_batch_size=2, data_parallel_size=3,
                                            decrease_batch_size_if_needed=False, step_batch_size_schedule="0:6", seq_length=128))
