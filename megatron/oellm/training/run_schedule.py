"""Checks of the run's schedule flags (run length, checkpoint saves, data phases, profiler steps) that megatron's
``validate_args`` accepts and megatron 0.19.2 fails on, or silently skips, only once the run is under way: at the
first save, when it builds the datasets, or when training starts. The training entry runs them on the validated
arguments, before Megatron allocates anything; it also prints :func:`profiler_trace_warnings`."""

from __future__ import annotations

import argparse
from pathlib import Path

from megatron.oellm.megatron_args import megatron_flag
from megatron.oellm.paths import nearest_existing, unwritable_reason


def _run_iterations(args: argparse.Namespace) -> int | None:
    """The iterations the run trains, as megatron 0.19.2 counts them: ``--train-iters``, or ``--train-samples`` over
    ``--global-batch-size`` rounded down; None where a ``--step-batch-size-schedule`` sets the steps."""
    if args.train_iters:
        return args.train_iters
    if args.train_samples and args.step_batch_size_schedule is None:
        return args.train_samples // args.global_batch_size
    return None


def check_run_length(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--train-samples`` below ``--global-batch-size`` (without
    ``--step-batch-size-schedule``): megatron 0.19.2 sets the run's iterations to ``train_samples //
    global_batch_size``, which is 0, builds the model, optimizer and data loaders, skips training and exits 0, so a
    job that waited in the queue trains nothing and reports success. ``--skip-train`` asks for no training and is
    left alone."""
    if not args.skip_train and args.train_samples and _run_iterations(args) == 0:
        raise ValueError(f"--train-samples {args.train_samples} is less than one step of --global-batch-size "
                         f"{args.global_batch_size}: megatron-core 0.19.2 rounds the run down to "
                         f"{args.train_samples} // {args.global_batch_size} = 0 iterations, sets up the model and "
                         "data, trains nothing and exits with success; give at least one global batch of samples")


def check_save_flags(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for save flags megatron 0.19.2 refuses at its first save, after ``--save-interval`` (or
    ``--non-persistent-save-interval``) iterations of training: ``--async-save`` with the legacy ``torch`` checkpoint
    format (``validate_args`` turns it off for the distributed formats without a persistent worker, not for this one;
    ``save_checkpoint`` then raises ``NotImplementedError``), and ``--non-persistent-save-interval`` without
    ``--non-persistent-ckpt-type`` (``save_checkpoint`` knows only ``global`` and ``local``); and a ``--save`` that
    cannot be a folder, because it or the nearest existing path above it is a file (megatron creates it at the first
    save)."""
    if not args.save:
        return
    save = Path(args.save)
    existing = nearest_existing(save)
    if not existing.is_dir():
        where = "is a file" if existing == save else f"lies under {existing}, which is a file"
        raise ValueError(f"--save {args.save} {where}: megatron-core saves each checkpoint into a folder there and "
                         "stops at its first save, after --save-interval iterations of training, when it cannot "
                         "create it; name a folder")
    if args.async_save and args.ckpt_format == "torch":
        raise ValueError("--async-save with --ckpt-format torch: megatron-core 0.19.2 saves torch-format checkpoints "
                         "only synchronously and stops with NotImplementedError at the first save, after "
                         "--save-interval iterations of training; use --ckpt-format torch_dist with "
                         "--use-persistent-ckpt-worker (and --async-strategy mcore where nvidia-resiliency-ext is not "
                         "installed), or drop --async-save")
    if args.non_persistent_save_interval and args.non_persistent_ckpt_type is None:
        raise ValueError(f"--non-persistent-save-interval {args.non_persistent_save_interval} without "
                         "--non-persistent-ckpt-type: megatron-core 0.19.2 stops with NotImplementedError at its "
                         f"first non-persistent save (iteration {args.non_persistent_save_interval}, unless a "
                         "persistent save falls there); add --non-persistent-ckpt-type global (or local), or drop "
                         "--non-persistent-save-interval")


def check_save_directory(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for a ``--save`` folder megatron-core 0.19.2 would fail on, or overwrite another run in,
    only at its first save, after ``--save-interval`` iterations of training (all of them lost), read on this node's
    file system without creating anything: :func:`check_save_writable`, :func:`check_save_not_another_run`. The
    training entry runs it on its own node (the recipes check a command line on another machine, where the job's
    folders may not exist), after :func:`check_save_flags`."""
    from megatron.oellm.training.stored_checkpoint import on_object_storage  # imports torch: only here

    if args.save and not on_object_storage(args, args.save):
        check_save_writable(args.save)
        check_save_not_another_run(args)


def check_save_writable(save: str) -> None:
    """Raise ``ValueError`` when this process could not create ``--save save`` or write into it
    (:func:`megatron.oellm.paths.unwritable_reason`: a read-only mount, ``/proc`` or ``/sys``, a folder
    of another user): megatron creates it, and writes each checkpoint, only when it first saves."""
    reason = unwritable_reason(Path(save))
    if reason is not None:
        raise ValueError(f"--save {save} cannot be written: {reason}; megatron-core creates it only at its first "
                         "save, after --save-interval iterations of training, and stops there; give a folder this "
                         "job can write")


def output_directories(args: argparse.Namespace) -> dict[str, str]:
    """The folders megatron 0.19.2 creates when its writers start, before the first step (flag -> folder), of
    ``args``: ``--tensorboard-dir`` (torch's ``SummaryWriter``, on the last rank) and, in a run that logs to Weights &
    Biases (``--wandb-project``), ``--wandb-save-dir`` (``os.makedirs``, on the last rank). Object-storage URLs
    (``scheme://``) are left to their writers."""
    folders = {"--tensorboard-dir": args.tensorboard_dir,
               "--wandb-save-dir": args.wandb_save_dir if args.wandb_project else None}
    return {flag: folder for flag, folder in folders.items() if folder and "://" not in folder}


def check_output_directories(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for an :func:`output_directories` folder this process could not create or write into
    (:func:`megatron.oellm.paths.unwritable_reason`: a path under a file, a read-only mount, a folder of another
    user): megatron's writer set-up fails there at job start, on the last rank, while the other ranks wait. Read on
    this node's file system without creating anything; the training entry's only (a recipe is resolved away from the
    job's folders)."""
    for flag, folder in output_directories(args).items():
        reason = unwritable_reason(Path(folder))
        if reason is not None:
            raise ValueError(f"{flag} {folder} cannot be written: {reason}; megatron-core creates it when its writers "
                             "start and stops there on the last rank, while the other ranks wait; give a folder this "
                             "job can write")


def check_save_not_another_run(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` when ``--save`` holds checkpoints (its ``latest_checkpointed_iteration.txt``) and
    ``--load`` is not that folder (:func:`megatron.oellm.training.stored_checkpoint.same_directory`): megatron-core
    loads nothing from it and, from its first save on, writes this job's iterations and tracker over them (another
    run's, whose later jobs then resume this one, or this run's from an earlier job)."""
    from megatron.oellm.training.stored_checkpoint import (  # imports torch, through the converter's pipeline
        TRACKER_FILE,
        has_tracker,
        same_directory,
        tracked_checkpoint,
    )

    save = Path(args.save)
    if same_directory(args.load, save) or not has_tracker(save):
        return
    try:
        tracked = tracked_checkpoint(save)
    except ValueError:  # unreadable or not an iteration: still another run's tracker
        tracked = None
    latest = (f"latest iteration {tracked}" if isinstance(tracked, int) else
              f"tracker naming {tracked}" if tracked else f"a {TRACKER_FILE} megatron-core cannot read")
    loading = f"--load is {args.load}" if args.load else "the run has no --load"
    raise ValueError(f"--save {save} holds checkpoints this job does not load ({latest}; another run's, or this "
                     f"run's from an earlier job) and {loading}: megatron-core would write this job's iterations and "
                     f"{TRACKER_FILE} over them from its first save on; give a new --save folder, or --load {save} "
                     "to resume from them")


DUMP_INTERVALS = ("save_wgrads_interval", "save_dgrads_interval", "save_params_interval")
"""Intervals at which megatron-core 0.19.2 writes weight gradients, activation gradients or parameters into the
``--save`` directory."""


def check_dump_directory(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for one of :data:`DUMP_INTERVALS` without ``--save``: megatron-core 0.19.2 checks the
    intervals only beside ``--save`` and, without it, asserts a save directory at the interval's first iteration,
    after the model is set up and that many iterations have trained."""
    if args.save:
        return
    for name in DUMP_INTERVALS:
        interval = getattr(args, name, None)
        if interval:
            flag = megatron_flag(name)
            raise ValueError(f"{flag} {interval} without --save: megatron-core 0.19.2 writes these tensors under the "
                             f"--save directory and stops with an AssertionError at iteration {interval}, after "
                             f"training that far; add --save DIR or drop {flag}")


def check_phase_transitions(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--phase-transition-iterations`` in a run sized by ``--train-iters``: megatron 0.19.2
    sizes each phase's training samples up to ``args.train_samples``, which is None then, and stops with a
    ``TypeError`` when it builds the datasets (after the model and optimizer are set up, also under
    ``--skip-train``)."""
    if args.phase_transition_iterations and args.train_samples is None:
        raise ValueError("--phase-transition-iterations needs the run's length as --train-samples: megatron-core "
                         "0.19.2 sizes each phase's data up to it and, with --train-iters, stops with a TypeError "
                         "when it builds the datasets, after the model is set up; give --train-samples (the "
                         "iterations x --global-batch-size) instead of --train-iters")


def check_profiler_steps(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--profile`` steps megatron 0.19.2 never profiles or never finishes profiling, in a
    run that trains: with ``--use-pytorch-profiler``, ``--profile-step-end`` not after ``--profile-step-start``
    (megatron hands torch's profiler schedule ``end - start`` active steps, which it refuses, an ``AssertionError``,
    when training starts, on the profiled ranks only) or after the run's last iteration (megatron stops the
    profiler, and torch writes the trace, only when the iteration reaches the end step: no trace, no message); and
    a ``--profile-step-start`` at or past the run's last iteration (megatron starts profiling, nsys or torch, only
    when the iteration reaches it: nothing profiled)."""
    if not args.profile or args.skip_train:
        return
    start, end = args.profile_step_start, args.profile_step_end
    if args.use_pytorch_profiler and end <= start:
        raise ValueError(f"--profile-step-end {end} is not after --profile-step-start {start}: megatron-core 0.19.2 "
                         f"asks torch's profiler for {end - start} active steps, which it refuses when training "
                         "starts (on the --profile-ranks only, leaving the other ranks waiting); give an end step "
                         "after the start step")
    iterations = _run_iterations(args)
    if iterations is None:
        return
    if start >= iterations:
        raise ValueError(f"--profile-step-start {start} is not before the run's end at iteration {iterations}: "
                         "megatron-core 0.19.2 starts profiling when the iteration reaches the start step, so "
                         f"nothing would be profiled; give a start step below {iterations} (the default is 10)")
    if args.use_pytorch_profiler and end > iterations:
        raise ValueError(f"--profile-step-end {end} is past the run's end at iteration {iterations}: megatron-core "
                         "0.19.2 stops torch's profiler, which then writes the trace, only when the iteration "
                         f"reaches the end step, so no trace would be written; give an end step of at most "
                         f"{iterations}")


def profiler_trace_warnings(args: argparse.Namespace, cwd: Path) -> list[str]:
    """One warning for ``--profile --use-pytorch-profiler`` without ``--tensorboard-dir``, naming where the traces
    go: megatron 0.19.2 writes them to ``<tensorboard_dir>/../torch_profile`` (Chakra traces to ``../chakra``), which
    without the flag is ``None/../torch_profile``: the traces land in ``torch_profile`` under the working directory
    ``cwd`` (often the container's or the submit directory) beside an empty ``None`` directory. A warning, not a
    refusal: the traces are written, only not where the user looks."""
    if not (args.profile and args.use_pytorch_profiler) or args.tensorboard_dir is not None:
        return []
    chakra = (f" (and the Chakra execution traces to {cwd / 'chakra'})" if args.pytorch_profiler_collect_chakra
              else "")
    return [f"--use-pytorch-profiler without --tensorboard-dir: megatron-core 0.19.2 writes the profiler traces to "
            f"{cwd / 'torch_profile'}{chakra}, under the working directory, and leaves an empty directory "
            f"{cwd / 'None'} there; give --tensorboard-dir DIR to have them written to DIR/../torch_profile"]
