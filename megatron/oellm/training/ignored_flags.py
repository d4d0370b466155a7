"""Flags that megatron-core 0.19.2 parses and then ignores, in the run a command line describes: the training entry
prints one warning line each on rank 0, so that nothing a user wrote is dropped without a word."""

from __future__ import annotations

import argparse
from collections.abc import Set

from megatron.oellm.megatron_args import megatron_flag

DYNAMIC_LOSS_SCALER_FLAGS = {
    "initial_loss_scale": "--initial-loss-scale",
    "min_loss_scale": "--min-loss-scale",
    "loss_scale_window": "--loss-scale-window",
    "hysteresis": "--hysteresis",
}
"""Destinations -> flags that only fp16's dynamic loss scaler reads (megatron-core's ``get_megatron_optimizer``)."""

RECOMPUTE_SETTINGS = ("recompute_method", "recompute_num_layers", "recompute_modules")
"""Destinations of the flags that megatron-core reads only under a ``--recompute-granularity``."""


def has_dynamic_loss_scaler(args: argparse.Namespace) -> bool:
    """Whether megatron-core builds fp16's dynamic loss scaler for ``args``: ``--fp16`` without a constant
    ``--loss-scale``. ``validate_args`` then also turns the NaN check of the loss and gradients off."""
    return bool(args.fp16 and not args.loss_scale)


def ignored_flag_warnings(args: argparse.Namespace, explicit: Set[str]) -> list[str]:
    """One warning per ignored flag among megatron's validated ``args``.

    ``explicit`` holds the parser destinations the command line sets; flags with defaults are named only when given.
    Three cases:
    - ``--exit-signal-handler-for-dataloader``: megatron-core 0.19.2 defines it and reads it nowhere.
    - The dynamic loss scaler's flags in a run without that scaler: not ``--fp16``, or ``--fp16`` with a constant
      ``--loss-scale``.
    - ``--moe-token-drop-policy`` without ``--moe-expert-capacity-factor``: megatron's router applies the policy only
      when it drops tokens at a capacity, and dropless routing drops none.
    - The recompute flags without ``--recompute-granularity`` (megatron-core's config checks them only with one, and
      nothing recomputes), and ``--recompute-modules`` under ``full`` (only selective recompute reads it): a run
      that meant to save memory would find out by running out of it.
    """
    warnings = []
    if args.exit_signal_handler_for_dataloader:
        warnings.append("--exit-signal-handler-for-dataloader does nothing: megatron-core 0.19.2 defines the flag "
                        "and never reads it (its data loader workers install the signal handler when "
                        "--exit-signal-handler is given)")
    given = [flag for dest, flag in DYNAMIC_LOSS_SCALER_FLAGS.items() if dest in explicit]
    if given and not has_dynamic_loss_scaler(args):
        scaler = (f"--loss-scale {args.loss_scale:g} sets a constant scale" if args.loss_scale
                  else "only --fp16 runs scale the loss")
        warnings.append(f"{', '.join(given)} tune fp16's dynamic loss scaler, which this run does not have "
                        f"({scaler}): ignored")
    if "moe_token_drop_policy" in explicit and args.moe_expert_capacity_factor is None:
        warnings.append(f"--moe-token-drop-policy {args.moe_token_drop_policy} does nothing without "
                        "--moe-expert-capacity-factor: megatron-core 0.19.2's router drops tokens, by that policy, "
                        "only at a capacity, and this run's routing is dropless")
    recompute = [megatron_flag(dest) for dest in RECOMPUTE_SETTINGS if dest in explicit]
    if recompute and args.recompute_granularity is None:
        warnings.append(f"{', '.join(recompute)} do{'es' if len(recompute) == 1 else ''} nothing without "
                        "--recompute-granularity (full or selective): this run recomputes no activations")
    elif "recompute_modules" in explicit and args.recompute_granularity == "full":
        warnings.append("--recompute-modules does nothing under --recompute-granularity full, which recomputes whole "
                        "layers (by --recompute-method and --recompute-num-layers); the modules are selective "
                        "recompute's")
    return warnings
