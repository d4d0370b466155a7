"""Behaviour of the training entry's smaller check modules that a mutation audit (eighth round) found untested: each
test pins a refusal, its wording, or a run the checks must let through."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    entry_up_to_pretrain,
    installed_stand_in,
    refused_line,
    validated_tiny_moe_run,
)

SCHEDULE_BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--seq-length", "128", "--mock-data", "--micro-batch-size",
                 "1", "--global-batch-size", "8"]


@pytest.mark.parametrize(("length", "decay_flag", "unit"), [("--train-iters", "--lr-decay-iters", "iterations"),
                                                            ("--train-samples", "--lr-decay-samples", "samples")])
def test_a_decay_of_zero_length_is_named_as_such_not_as_a_warm_up_problem(length, decay_flag, unit):
    """``--lr-decay-iters 0`` (or ``--lr-decay-samples 0``) without a warm-up: the refusal says the decay needs a
    positive length, the fix the user needs, rather than blaming a warm-up of 0 that the user never gave."""
    from megatron.oellm.training.lr_schedule import check_lr_schedule

    run = random.randint(50, 5000)
    args = parse_oellm_argv([*SCHEDULE_BASE, length, str(run), "--lr", str(random.uniform(1e-5, 1e-3)), decay_flag,
                             "0"])
    with pytest.raises(ValueError) as refused:
        check_lr_schedule(args)
    assert str(refused.value).startswith(f"{decay_flag} 0 {unit}: the learning rate must decay over a positive "
                                         f"number of {unit}")
    assert "warm-up" not in str(refused.value)


def test_a_peak_learning_rate_of_zero_is_a_schedule_megatron_builds():
    """``--lr 0`` (a run that moves no weights: a throughput or data-pipeline check) is a learning rate, not a missing
    one: megatron-core's ``OptimizerParamScheduler`` builds it with ``--min-lr 0``, so only an absent ``--lr`` is
    refused."""
    import types

    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from megatron.oellm.training.lr_schedule import check_lr_schedule

    iters = random.randint(10, 5000)
    OptimizerParamScheduler(types.SimpleNamespace(param_groups=[]), init_lr=0.0, max_lr=0.0, min_lr=0.0,
                            lr_warmup_steps=0, lr_decay_steps=iters, lr_decay_style="cosine", start_wd=0.1,
                            end_wd=0.1, wd_incr_steps=iters, wd_incr_style="constant")
    check_lr_schedule(parse_oellm_argv([*SCHEDULE_BASE, "--train-iters", str(iters), "--lr", "0"]))
    with pytest.raises(ValueError, match="give the peak learning rate as --lr"):
        check_lr_schedule(parse_oellm_argv([*SCHEDULE_BASE, "--train-iters", str(iters)]))


@pytest.mark.parametrize("extra", [["--rerun-mode", "disabled"], ["--no-check-for-nan-in-loss-and-grad"],
                                   ["--fp16"]])
def test_a_run_without_error_injection_may_disable_reruns_or_validations(extra):
    """The error-injection refusals concern ``--error-injection-rate`` only: a run that injects nothing (rate 0, the
    default) may disable the rerun state machine or validate nothing."""
    from megatron.oellm.training.fault_handling import check_error_injection

    args = validated_tiny_moe_run(extra)
    assert not args.error_injection_rate
    check_error_injection(args)


def test_a_step_batch_size_schedule_run_shorter_than_the_final_batch_is_not_refused_as_zero_iterations():
    """Under ``--step-batch-size-schedule`` megatron counts the run's iterations by walking the schedule (at least
    one while samples remain), not as ``--train-samples // --global-batch-size``: a run of fewer samples than the
    final global batch trains, so the zero-iteration refusal and the profiler's end-of-run check leave it alone."""
    from megatron.oellm.training.run_schedule import check_profiler_steps, check_run_length

    batch = 8 * random.randint(2, 8)
    samples = random.randint(8, batch - 1)
    args = parse_oellm_argv([*SCHEDULE_BASE[:-1], str(batch), "--train-samples", str(samples), "--lr", "1e-4",
                             "--step-batch-size-schedule", f"0:8 {samples}:{batch}", "--profile",
                             "--profile-step-start", "0", "--profile-step-end", "1"])
    assert samples // batch == 0
    check_run_length(args)
    check_profiler_steps(args)


def test_virtual_stages_without_pipeline_parallelism_are_left_to_the_non_interleaved_schedule():
    """At pipeline size 1 megatron-core runs ``forward_backward_no_pipelining`` (its ``get_forward_backward_func``
    picks the interleaved schedule only above 1) and builds one model chunk, whatever
    ``--num-virtual-stages-per-pipeline-rank`` says: no micro-batch count is refused there, even one below a
    ``--microbatch-group-size-per-virtual-pipeline-stage`` the interleaved schedule would refuse."""
    import types

    from megatron.core.pipeline_parallel import schedules

    from megatron.oellm.training.pipeline_schedule import check_interleaved_microbatches

    virtual = random.randint(2, 4)
    assert schedules.get_forward_backward_func(pp_size=1, vp_size=virtual) is schedules.forward_backward_no_pipelining
    group = random.randint(4, 8)
    microbatches = random.randint(1, group - 1)
    args = types.SimpleNamespace(
        pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=virtual, micro_batch_size=1,
        data_parallel_size=2, global_batch_size=2 * microbatches, microbatch_group_size_per_vp_stage=group,
        step_batch_size_schedule=None, decrease_batch_size_if_needed=False, full_validation=False, eval_iters=10,
        eval_global_batch_size=None, eval_micro_batch_size=None)
    check_interleaved_microbatches(args)


@pytest.mark.parametrize(("flag", "module"), [("--enable-ft-package", "fault_tolerance"),
                                              ("--inprocess-restart", "inprocess")])
def test_a_resiliency_install_without_the_flags_submodule_is_refused(monkeypatch, capsys, flag, module):
    """megatron imports ``nvidia_resiliency_ext.<module>`` for the flag, not just the top package: an install whose
    package lacks that submodule (an older or partial nvidia-resiliency-ext) fails there once the run is under way,
    so the entry refuses it; with the submodule present the run goes on."""
    import importlib

    installed_stand_in(monkeypatch, "nvidia_resiliency_ext")
    with pytest.raises(ImportError):
        importlib.import_module(f"nvidia_resiliency_ext.{module}")
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*TINY_MOE_RUN, flag])
    assert f"{flag} needs the nvidia-resiliency-ext package, which is not installed in this environment" in line
    if flag == "--enable-ft-package":  # --inprocess-restart goes on into megatron's wrapper, which needs the real one
        installed_stand_in(monkeypatch, f"nvidia_resiliency_ext.{module}")
        with pytest.raises(Reached):
            entry.main([*TINY_MOE_RUN, flag])


def test_every_dynamic_loss_scaler_flag_given_is_named_in_the_warning():
    """A bf16 run given all four flags of fp16's dynamic loss scaler: the one warning names each (the neighbouring
    test draws a random subset, often of one flag, which a warning naming only the first flag also passes)."""
    from megatron.oellm.training.args import explicit_destinations, merge_card_flags
    from megatron.oellm.training.ignored_flags import DYNAMIC_LOSS_SCALER_FLAGS, ignored_flag_warnings

    values = {"--hysteresis": random.randint(1, 8), "--initial-loss-scale": 2 ** random.randint(8, 32),
              "--min-loss-scale": random.randint(1, 4), "--loss-scale-window": random.randint(100, 2000)}
    assert set(values) == set(DYNAMIC_LOSS_SCALER_FLAGS.values())
    order = random.sample(sorted(values), k=len(values))
    extra = ["--bf16", *(word for flag in order for word in (flag, str(values[flag])))]
    argv = merge_card_flags([*TINY_MOE_RUN, *extra]).argv
    (warning,) = ignored_flag_warnings(validated_tiny_moe_run(extra), explicit_destinations(argv))
    assert all(flag in warning for flag in values), warning
    assert "only --fp16 runs scale the loss" in warning
