"""The learning-rate and weight-decay schedule checked before Megatron initialises.

megatron-core builds its ``OptimizerParamScheduler`` only after the model and optimizer are allocated on every rank,
and refuses a bad schedule there, mostly with an ``assert`` that has no message. The training entry and
``oellm recipe --dry-run`` / ``--submit`` (:mod:`megatron.oellm.recipes.megatron_validation`) apply the same rules
on the validated arguments first.
"""

from __future__ import annotations

import argparse


def check_lr_schedule(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for a learning-rate and weight-decay schedule megatron-core 0.19.2's
    ``OptimizerParamScheduler`` refuses: no run length (``--train-iters`` / ``--train-samples``), no ``--lr``, a
    decay of no length, a warm-up not shorter than the decay, ``--lr-decay-style WSD`` without the length of its
    final decay, ``--lr-warmup-init`` above ``--lr``, a negative ``--min-lr`` or start weight decay, a weight decay
    that would fall, or ``--override-opt_param-scheduler`` beside ``--use-checkpoint-opt_param-scheduler``.

    ``args`` are the validated arguments. Megatron builds the schedule only after the model and optimizer are
    allocated on every rank, and refuses most of these with an ``assert`` that has no message. Warm-up and decay are
    compared in the unit the run counts in (iterations, or samples under ``--train-samples``), where megatron
    compares both times the global batch size. A run under ``--skip-train`` builds no optimizer and is left alone.
    """
    if args.skip_train:
        return
    after = ("megatron-core fails on it when it builds the learning-rate schedule, after allocating the model and "
             "optimizer on every rank")
    if not (args.train_iters or args.train_samples):
        raise ValueError(f"give the run's length as --train-iters N or --train-samples N (a positive count): {after}")
    if args.lr is None:
        raise ValueError(f"give the peak learning rate as --lr: {after}")
    if args.train_iters:
        unit, length, decay_flag, decay, warmup_flag, warmup = (
            "iterations", f"--train-iters {args.train_iters}", "--lr-decay-iters", args.lr_decay_iters,
            "--lr-warmup-iters", args.lr_warmup_iters)
        decay_length = args.train_iters if decay is None else decay
    else:
        unit, length, decay_flag, decay, warmup_flag, warmup = (
            "samples", f"--train-samples {args.train_samples}", "--lr-decay-samples", args.lr_decay_samples,
            "--lr-warmup-samples", args.lr_warmup_samples)
        decay_length = args.train_samples if decay is None else decay
    decay_text = f"{length} {unit}" if decay is None else f"{decay_flag} {decay} {unit}"
    if decay_length <= 0:
        raise ValueError(f"{decay_text}: the learning rate must decay over a positive number of {unit}; {after}")
    if args.lr_warmup_fraction is not None:
        warmup_text, warmup_length = (f"--lr-warmup-fraction {args.lr_warmup_fraction}",
                                      args.lr_warmup_fraction * decay_length)
    else:
        warmup_text, warmup_length = f"{warmup_flag} {warmup}", warmup
    if warmup_length >= decay_length:
        raise ValueError(f"the warm-up ({warmup_text}) is not shorter than the decay ({decay_text}): {after}; "
                         "shorten the warm-up or lengthen the decay")
    wsd_flag = "--lr-wsd-decay-iters" if args.train_iters else "--lr-wsd-decay-samples"
    if args.lr_decay_style == "WSD" and getattr(args, wsd_flag.removeprefix("--").replace("-", "_")) is None:
        raise ValueError(f"--lr-decay-style WSD: give the length of its final decay as {wsd_flag}; {after}")
    if args.min_lr < 0:
        raise ValueError(f"--min-lr {args.min_lr} is negative: the learning rate decays to it; {after}; give 0 or more")
    if args.lr_warmup_init > args.lr:
        raise ValueError(f"--lr-warmup-init {args.lr_warmup_init} exceeds --lr {args.lr}: the warm-up rises to the "
                         f"peak learning rate; {after}")
    start, end = args.start_weight_decay, args.end_weight_decay
    if start is not None and start < 0:
        flag = "--weight-decay" if args.weight_decay_incr_style == "constant" else "--start-weight-decay"
        raise ValueError(f"{flag} {start} is negative: megatron-core's weight decay starts there; {after}; give 0 or "
                         "more")
    if start is not None and end is not None and start > end:
        raise ValueError(f"--start-weight-decay {start} exceeds --end-weight-decay {end}: megatron-core's weight decay "
                         f"only rises over the run (--weight-decay-incr-style {args.weight_decay_incr_style}); {after}")
    if args.override_opt_param_scheduler and args.use_checkpoint_opt_param_scheduler:
        raise ValueError("--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler both given: the "
                         f"schedule comes either from the command line or from the checkpoint, give one; {after}")
