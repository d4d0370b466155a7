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

FP8_SETTING_FLAGS = {
    "fp8_recipe": "--fp8-recipe",
    "fp8_margin": "--fp8-margin",
    "fp8_amax_history_len": "--fp8-amax-history-len",
    "fp8_amax_compute_algo": "--fp8-amax-compute-algo",
    "fp8_wgrad": "--no-fp8-wgrad",
    "fp8_quantizer_factory": "--fp8-quantizer-factory",
}
"""Destinations -> flags of the FP8 recipe settings that megatron-core 0.19.2 reads only with ``--fp8-format``
(its FP8 recipe and context are built only then; ``--fp8-param-gather`` and ``--fp8-output-proj`` without the format
are refused by its ``TransformerConfig``, not ignored)."""

RECOMPUTE_SETTINGS = ("recompute_method", "recompute_num_layers", "recompute_modules")
"""Destinations of the flags that megatron-core reads only under a ``--recompute-granularity``."""


def has_dynamic_loss_scaler(args: argparse.Namespace) -> bool:
    """Whether megatron-core builds fp16's dynamic loss scaler for ``args``: ``--fp16`` without a constant
    ``--loss-scale``. ``validate_args`` then also turns the NaN check of the loss and gradients off."""
    return bool(args.fp16 and not args.loss_scale)


def ignored_flag_warnings(args: argparse.Namespace, explicit: Set[str]) -> list[str]:
    """One warning per ignored flag among megatron's validated ``args``.

    ``explicit`` holds the parser destinations the command line sets; flags with defaults are named only when given.
    The cases:
    - ``--exit-signal-handler-for-dataloader``: megatron-core 0.19.2 defines it and reads it nowhere.
    - The dynamic loss scaler's flags in a run without that scaler: not ``--fp16``, or ``--fp16`` with a constant
      ``--loss-scale``.
    - ``--moe-token-drop-policy`` without ``--moe-expert-capacity-factor``: megatron's router applies the policy only
      when it drops tokens at a capacity, and dropless routing drops none.
    - The FP8 recipe settings (:data:`FP8_SETTING_FLAGS`) without ``--fp8-format``: the run trains in its
      ``--bf16`` / ``--fp16`` / fp32 precision, not in FP8, with no other word.
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
    fp8_settings = [flag for dest, flag in FP8_SETTING_FLAGS.items() if dest in explicit]
    if fp8_settings and args.fp8 is None:
        warnings.append(f"{', '.join(fp8_settings)} do{'es' if len(fp8_settings) == 1 else ''} nothing without "
                        "--fp8-format (e4m3 or hybrid): megatron-core 0.19.2 trains in FP8 only with a format, so "
                        "this run trains in its other precision; add --fp8-format, or drop the FP8 flags")
    recompute = [megatron_flag(dest) for dest in RECOMPUTE_SETTINGS if dest in explicit]
    if recompute and args.recompute_granularity is None:
        warnings.append(f"{', '.join(recompute)} do{'es' if len(recompute) == 1 else ''} nothing without "
                        "--recompute-granularity (full or selective): this run recomputes no activations")
    elif "recompute_modules" in explicit and args.recompute_granularity == "full":
        warnings.append("--recompute-modules does nothing under --recompute-granularity full, which recomputes whole "
                        "layers (by --recompute-method and --recompute-num-layers); the modules are selective "
                        "recompute's")
    return warnings
