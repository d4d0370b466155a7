"""The micro-batch counts megatron-core's interleaved pipeline schedule accepts, checked before Megatron initialises.

With pipeline parallelism and virtual stages (``--num-virtual-stages-per-pipeline-rank``, or a custom layout that
gives each rank several stages) megatron-core 0.19.2 runs ``forward_backward_pipelining_with_interleaving``. At the
first training step, on every rank, after the model, optimizer and checkpoint are set up, it raises when the
micro-batches of one step, M = global batch / (micro batch x data-parallel size, with the weight-shard replicas of
``--tensor-parallel-num-weight-shards``), do not fit its groups of N
contiguous micro-batches per virtual stage (``--microbatch-group-size-per-virtual-pipeline-stage``, default the
pipeline size P): N must lie in [P, M], and the last group, M mod N, must be empty or hold at least P. Megatron's
``validate_args`` checks none of this.
"""

from __future__ import annotations

import argparse

from megatron.oellm.error_lines import message_or_type


def _weight_shard_replicas(args: argparse.Namespace) -> int:
    """Megatron's ``gtp_weight_remat_size`` (from ``--tensor-parallel-num-weight-shards``; 1 where the arguments lack
    it)."""
    return getattr(args, "gtp_weight_remat_size", 1)


def calculator_data_parallel_size(args: argparse.Namespace) -> int:
    """The data-parallel size megatron-core's micro-batch calculator divides the global batch by: Megatron's
    ``data_parallel_size`` times ``gtp_weight_remat_size`` (from ``--tensor-parallel-num-weight-shards``), whose
    ranks each draw their own micro-batches though ``data_parallel_size`` leaves them out."""
    return args.data_parallel_size * _weight_shard_replicas(args)


def _weight_shards_note(args: argparse.Namespace) -> str:
    """How the refusal names the weight-shard factor of :func:`calculator_data_parallel_size` (empty without one)."""
    remat = _weight_shard_replicas(args)
    if remat == 1:
        return ""
    return f": {args.data_parallel_size} x {remat} weight-shard replicas of --tensor-parallel-num-weight-shards"


def step_batch_sizes(args: argparse.Namespace) -> list[int]:
    """The global batch sizes a run trains with, as megatron-core's micro-batch calculator takes them: each size of
    ``--step-batch-size-schedule``, else ``--global-batch-size`` (rounded down to a multiple of micro batch x
    data-parallel size under ``--decrease-batch-size-if-needed``). ``--rampup-batch-size`` is deprecated and
    ignored by megatron-core 0.19.2's calculator, so it is ignored here too."""
    from megatron.core.num_microbatches_calculator import StepBatchsizeNumMicroBatchesCalculator

    if args.step_batch_size_schedule is not None:
        # the thresholds (samples or tokens) do not matter here, only the batch sizes
        schedule = StepBatchsizeNumMicroBatchesCalculator._parse_schedule(args.step_batch_size_schedule, None)
        return sorted({batch for _threshold, batch in schedule})
    per_step = args.micro_batch_size * calculator_data_parallel_size(args)
    if args.decrease_batch_size_if_needed:
        return [args.global_batch_size // per_step * per_step]
    return [args.global_batch_size]


def off_grid_batch_refusal(batch: int, micro: int, data_parallel: int, shards_note: str = "") -> str:
    """The one-line refusal of a global ``batch`` that is not a multiple of ``micro`` x ``data_parallel`` (the
    calculator's data-parallel size; ``shards_note`` says how it counts weight-shard replicas), with the nearest
    multiple as the way out: one wording for the entry's check and for megatron's refusal said of the training
    batch (:func:`megatron.oellm.training.startup_checks.training_batch_detail`)."""
    per_step = micro * data_parallel
    return (f"--global-batch-size {batch} is not a multiple of --micro-batch-size {micro} x data-parallel size "
            f"{data_parallel}{shards_note} = {per_step}: every step runs a whole number of micro-batches on each "
            f"data-parallel rank; use a multiple of {per_step} (e.g. {per_step * max(1, round(batch / per_step))}), "
            "or another --micro-batch-size")


def check_training_batch(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` in one line, before Megatron initialises, when megatron-core's micro-batch calculator would
    refuse the run's global batch on every rank after start-up: not a multiple of micro batch x data-parallel size
    (:func:`calculator_data_parallel_size`), or, under ``--decrease-batch-size-if-needed``, smaller than one
    (rounded down to no micro-batch). ``validate_args`` checks the evaluation batch only, which passes where the
    command line gives evaluation sizes of their own. The sizes of ``--step-batch-size-schedule`` are left to
    megatron-core, which checks the current one at run time by design (a run may grow its GPU count); the schedule
    itself is checked as megatron-core builds it (:func:`check_batch_size_schedule`)."""
    if args.step_batch_size_schedule is not None:
        check_batch_size_schedule(args)
        return
    batch, micro, data_parallel = args.global_batch_size, args.micro_batch_size, calculator_data_parallel_size(args)
    per_step = micro * data_parallel
    if args.decrease_batch_size_if_needed:
        if batch < per_step:
            raise ValueError(f"--global-batch-size {batch} is below --micro-batch-size {micro} x data-parallel size "
                             f"{data_parallel}{_weight_shards_note(args)} = {per_step}: --decrease-batch-size-if-needed "
                             f"rounds it down to no micro-batch, and megatron-core stops at start-up; give at least "
                             f"{per_step}")
        return
    if batch % per_step:
        raise ValueError(off_grid_batch_refusal(batch, micro, data_parallel, _weight_shards_note(args)))


def check_batch_size_schedule(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` in one line when megatron-core's step batch-size calculator refuses validated ``args``'
    ``--step-batch-size-schedule`` as megatron builds it when it sets up the run, on every rank after the tokenizer:
    a first threshold other than 0, thresholds that do not increase, a size that is not positive, or the schedule
    beside ``--decrease-batch-size-if-needed``. The calculator megatron-core builds is built here the same way (its
    own builder, so its rules are not restated), on a rank that logs nothing, and dropped."""
    from megatron.core.num_microbatches_calculator import _build_num_microbatches_calculator

    try:
        _build_num_microbatches_calculator(
            rank=-1, global_batch_size=args.global_batch_size, micro_batch_size=args.micro_batch_size,
            data_parallel_size=calculator_data_parallel_size(args),
            decrease_batch_size_if_needed=args.decrease_batch_size_if_needed,
            step_batch_size_schedule=args.step_batch_size_schedule, seq_length=args.seq_length)
    except (AssertionError, ValueError) as error:
        raise ValueError(f"--step-batch-size-schedule {args.step_batch_size_schedule!r}: megatron-core's micro-batch "
                         "calculator refuses it when megatron sets up the run, on every rank: "
                         f"{message_or_type(error)}") from error


def interleaved_schedule_refusal(microbatches: int, pipeline: int, group: int) -> str | None:
    """Why megatron-core's interleaved schedule refuses ``microbatches`` per step at pipeline size ``pipeline`` with
    ``group`` contiguous micro-batches per virtual stage, or None when it runs them."""
    if not pipeline <= group <= microbatches:
        return (f"the micro-batch group per virtual stage ({group}) must lie between the pipeline size ({pipeline}) "
                f"and the micro-batches per step ({microbatches})")
    last = microbatches % group
    if 0 < last < pipeline:
        return (f"the {microbatches} micro-batches per step leave a last group of {last} (of {group} per virtual "
                f"stage), fewer than the pipeline size {pipeline}")
    return None


def _interleaved_refusal_line(args: argparse.Namespace, when: str, sizes: tuple[str, int, str, int]) -> str | None:
    """The one-line refusal for a step of ``sizes`` (how the batch is named, its samples, how the micro batch is
    named, its samples) that megatron-core's interleaved schedule refuses ``when`` (at the first step or
    evaluation), or None when it runs them."""
    batch_text, batch, micro_text, micro = sizes
    pipeline = args.pipeline_model_parallel_size
    group = args.microbatch_group_size_per_vp_stage or pipeline
    data_parallel = calculator_data_parallel_size(args)
    microbatches = batch // (micro * data_parallel)
    refusal = interleaved_schedule_refusal(microbatches, pipeline, group)
    if refusal is None:
        return None
    return (f"megatron-core's interleaved pipeline schedule (pipeline size {pipeline} with virtual stages) would stop "
            f"{when}: {batch_text} {batch} / ({micro_text} {micro} x data-parallel size {data_parallel}"
            f"{_weight_shards_note(args)}) = {microbatches} micro-batches per step, and {refusal}; use a batch whose "
            f"micro-batch count is a multiple of {group} (at least {group}), or set "
            "--microbatch-group-size-per-virtual-pipeline-stage")


def check_interleaved_microbatches(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` in one line, before Megatron initialises, when megatron-core's interleaved pipeline
    schedule would refuse the run's micro-batches per step at its first training step (module docstring), or, in a
    run that evaluates, the micro-batches of one evaluation step: ``--eval-global-batch-size`` over
    ``--eval-micro-batch-size`` times the data-parallel size, which megatron runs through the same schedule at the
    first evaluation (after ``--eval-interval`` steps, at the end of the run, or at once under ``--skip-train``).
    ``args`` are Megatron's validated arguments (``data_parallel_size`` set; the evaluation batch sizes default to
    the training ones)."""
    from megatron.oellm.training.data_sources import evaluates

    if args.pipeline_model_parallel_size == 1 or args.virtual_pipeline_model_parallel_size is None:
        return
    refusals = [_interleaved_refusal_line(args, "at the first step",
                                          ("global batch", batch, "micro batch", args.micro_batch_size))
                for batch in step_batch_sizes(args)]
    if evaluates(args):
        eval_batch = args.eval_global_batch_size or args.global_batch_size
        eval_micro = args.eval_micro_batch_size or args.micro_batch_size
        refusals.append(_interleaved_refusal_line(args, "at the first evaluation", (
            "--eval-global-batch-size", eval_batch, "--eval-micro-batch-size", eval_micro)))
    for refusal in refusals:
        if refusal:
            raise ValueError(refusal)
