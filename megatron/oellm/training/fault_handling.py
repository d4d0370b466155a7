"""Fault-handling flags that megatron-core 0.19.2 accepts and then does not act on, or fails on: its signal handlers,
its error injection and its rerun mode. Refused before Megatron starts: otherwise the user finds out only when the
fault comes (a preempted job that saved nothing, a resilience test that injected nothing), or from a traceback on
every rank."""

from __future__ import annotations

import argparse
import signal

from megatron.oellm.training.ignored_flags import has_dynamic_loss_scaler

HANDLERS_REPLACED_BY_TRAINING_SHUTDOWN = (signal.SIGINT, signal.SIGTERM)
"""The signals whose handler ``--exit-signal-handler-for-training`` installs, after (so over) the one of
``--exit-signal-handler`` (megatron's ``set_global_variables``)."""


def check_exit_signal_handlers(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--exit-signal-handler`` together with ``--exit-signal-handler-for-training`` when
    ``--exit-signal`` is SIGTERM (the default) or SIGINT.

    Megatron installs the saving handler first and the shutdown handler second, on the same signal. On that signal the
    run then exits with status 0 without the checkpoint ``--exit-signal-handler`` promises, for example on a SLURM
    preemption or time limit, and the job reports success."""
    if not (args.exit_signal_handler and args.exit_signal_handler_for_training):
        return
    exit_signal = signal.Signals(args.exit_signal)
    if exit_signal in HANDLERS_REPLACED_BY_TRAINING_SHUTDOWN:
        raise ValueError(f"--exit-signal-handler with --exit-signal-handler-for-training: megatron-core 0.19.2 "
                         f"installs the second's shutdown handler for SIGINT and SIGTERM over the first's, so on "
                         f"{exit_signal.name} the run exits with status 0 without saving a checkpoint; drop "
                         "--exit-signal-handler-for-training, or give --exit-signal another signal (e.g. SIGUSR1)")


def check_error_injection(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--error-injection-rate`` in a run where megatron injects nothing.

    Megatron injects errors only into the results its rerun state machine validates. It validates none under
    ``--rerun-mode disabled``. Without any of the checks that validate results, none is made either: the NaN/Inf check
    of the gradients (``--check-for-nan-in-loss-and-grad``, which ``--fp16`` without ``--loss-scale`` turns off),
    ``--check-for-spiky-loss`` and ``--check-for-large-grads``."""
    rate = args.error_injection_rate
    if not rate:
        return
    if args.rerun_mode == "disabled":
        raise ValueError(f"--error-injection-rate {rate} with --rerun-mode disabled: megatron-core 0.19.2 injects "
                         "errors only into the results its rerun state machine validates, which it skips when "
                         "disabled, so the run injects nothing; use --rerun-mode validate_results")
    if not (args.check_for_nan_in_loss_and_grad or args.check_for_spiky_loss or args.check_for_large_grads):
        why = " (--fp16 without --loss-scale turned the NaN check off)" if has_dynamic_loss_scaler(args) else ""
        raise ValueError(f"--error-injection-rate {rate}: megatron-core 0.19.2 injects errors only into validated "
                         f"results, and this run validates none{why}, so it injects nothing; add "
                         "--check-for-spiky-loss or --check-for-large-grads")


def check_rerun_mode(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--rerun-mode report_stats``.

    megatron-core 0.19.2's parser offers that choice, but ``initialize_megatron`` converts the value with
    ``RerunMode(args.rerun_mode)``, whose member for it is ``report_determinism_stats``. So the run stops with a
    ``ValueError`` traceback on every rank, and the determinism report cannot be run from the command line."""
    from megatron.core.rerun_state_machine import RerunMode

    if args.rerun_mode not in {mode.value for mode in RerunMode}:
        raise ValueError(f"--rerun-mode {args.rerun_mode}: megatron-core 0.19.2 offers the choice but has no rerun "
                         f"mode of that name (its modes: {', '.join(mode.value for mode in RerunMode)}) and stops "
                         "with a ValueError on every rank when it initialises; use --rerun-mode validate_results "
                         "(the default) or disabled")
