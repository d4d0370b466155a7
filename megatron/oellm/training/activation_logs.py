"""Megatron's activation, activation-gradient and tokens-per-expert logs (``--save-activations-interval``,
``--save-dgrads-interval``, ``--save-tokens-per-expert-interval``), checked against this node's Transformer Engine
and the run's backend.

megatron-core 0.19.2 finds the modules to log by their classes (``megatron.training.activation_logging``,
``megatron.training.dgrad_logging``): its lists hold Transformer Engine's, which are placeholders where TE does not
import, and its tokens-per-expert hook goes on TE's grouped linears only. They turn on at the logging iteration,
after the model and optimizer are set up, so the entry refuses what would fail or write nothing there, on its node (a
login node's TE is not the container's).
"""

from __future__ import annotations

import argparse


def check_activation_logging(args: argparse.Namespace, backend: str) -> None:
    """Raise ``ValueError`` for:

    - ``--save-activations-interval`` or ``--save-dgrads-interval`` where megatron's module classes include TE
      placeholders (TE does not import): its ``isinstance`` test then raises a ``TypeError`` at the first logging
      iteration, on every rank;
    - ``--save-tokens-per-expert-interval`` on the torch-native ``backend`` (its stacked expert linears are not TE's)
      or without TE's grouped linears: megatron hooks nothing, and the run writes no tokens-per-expert file.
    """
    from megatron.training import activation_logging, dgrad_logging

    for flag, interval, kinds in (("--save-activations-interval", args.save_activations_interval,
                                   activation_logging.LINEAR_TYPES),
                                  ("--save-dgrads-interval", args.save_dgrads_interval, dgrad_logging.LINEAR_TYPES)):
        if interval and not all(isinstance(kind, type) for kind in kinds):
            raise ValueError(f"{flag} {interval}: megatron-core 0.19.2 picks the modules to log by class, including "
                             "Transformer Engine's, which does not import here; it stops with a TypeError at the "
                             "first logging iteration, after setting up the model; run where Transformer Engine "
                             "imports or drop the flag")
    grouped = getattr(activation_logging, "_GROUPED_LINEAR_TYPES", ())
    if args.save_tokens_per_expert_interval and (backend == "torch" or not grouped):
        reason = ("the torch-native backend's experts are not those" if backend == "torch"
                  else "Transformer Engine's grouped linears do not import here")
        raise ValueError(f"--save-tokens-per-expert-interval {args.save_tokens_per_expert_interval}: megatron-core "
                         "0.19.2 records tokens per expert from Transformer Engine's grouped expert linears only, "
                         f"and {reason}: the run would write no tokens-per-expert file; drop the flag (megatron's "
                         "MoE metrics in the log line remain)")
