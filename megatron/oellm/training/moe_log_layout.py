"""Where megatron-core 0.19.2 writes a hybrid model's per-layer MoE series (``--moe-per-layer-logging``).

Its routers record each metric at their layer number among all the hybrid stack's layers, the mixer layers (Gated
DeltaNet, attention) included, and the tracker writes one TensorBoard / W&B series per index
(``moe/<metric>_layer_<i>``). So a hybrid model's series are numbered by position in ``--hybrid-layer-pattern``, not by
MoE layer, and the mixers' series stay 0. The averages on the log line are right; only the per-layer names need this
reading, which the training entry prints as a warning on rank 0.
"""

from __future__ import annotations

import argparse


def per_layer_log_warnings(args: argparse.Namespace) -> list[str]:
    """The warning for ``--moe-per-layer-logging`` on a hybrid MoE model, or none."""
    if not (args.moe_per_layer_logging and args.num_experts and getattr(args, "hybrid_layer_pattern", None)):
        return []
    return ["--moe-per-layer-logging on a hybrid model: megatron-core 0.19.2 numbers the series moe/<metric>_layer_<i> "
            "by position in --hybrid-layer-pattern (0-based, without '|'), mixer layers included: an MoE block's "
            "series is the position of its 'E', and the mixer layers' series stay 0"]
