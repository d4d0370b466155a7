"""Two gloo ranks of a pipeline-parallel hybrid model reporting megatron-core's MoE metrics (CPU).

Pipeline rank 0 holds no MoE block (hybrid pattern ``|GEGE``: its stage is empty), rank 1 holds both, whose routers
record the values given on the command line. Each rank then reports as ``training_log`` does (``force_initialize``,
``num_layers`` the ``E`` count, per-layer logging) and prints one JSON line: its console string and the per-layer
series its writer got, all through megatron-core's ``get_moe_metrics_tracker()``. ``--installed`` first sets the run's
tracker (:func:`megatron.oellm.training.moe_metrics.install_moe_metrics_tracker`) there, as the training entry does.

``python -m tests.unit_tests.training.pipeline_tracker_ranks [--installed] VALUE VALUE``
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta

import torch
import torch.multiprocessing

PATTERN = "|GEGE"
MOE_LAYER_NUMBERS = (2, 4)
"""1-based layer numbers of rank 1's MoE blocks among the pattern's four layers."""
METRIC = "global_load_balancing_loss"
LOAD_BALANCING_TYPE = "global_aux_loss"
"""The routing whose loss :data:`METRIC` is."""


class SeriesWriter:
    """Stands in for TensorBoard's writer: keeps the last value of each series."""

    def __init__(self):
        self.series: dict[str, float] = {}

    def add_scalar(self, name: str, value: float, iteration: int) -> None:
        self.series[name] = float(value)


def rank_main(rank: int, port: int, installed: bool, values: list[float]) -> None:
    """One pipeline rank: record (rank 1 only), report, print the JSON line."""
    from megatron.core import parallel_state
    from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

    import megatron.oellm.compat  # noqa: F401  (Python 3.11: typing.override for megatron.training)
    from megatron.oellm.training.moe_metrics import install_moe_metrics_tracker

    if installed:
        install_moe_metrics_tracker(LOAD_BALANCING_TYPE, PATTERN)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                         timeout=timedelta(seconds=60))  # a collective left waiting fails, not hangs
    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=2)
    tracker, writer = get_moe_metrics_tracker(), SeriesWriter()
    if rank == 1:
        for layer_number, value in zip(MOE_LAYER_NUMBERS, values, strict=True):
            tracker.record(METRIC, torch.tensor(value), layer_number, len(PATTERN) - 1)
    line = tracker.report(loss_scale=1.0, iteration=1, writer=writer, per_layer_logging=True, force_initialize=True,
                          track_names=[METRIC], num_layers=len(MOE_LAYER_NUMBERS), moe_layer_freq=1)
    # one write per line: the forked ranks share stdout, and print's separate newline write can interleave
    sys.stdout.write(json.dumps({"rank": rank, "line": line, "series": writer.series}) + "\n")
    sys.stdout.flush()
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Start both ranks; non-zero if either fails."""
    from megatron.core.transformer.moe import moe_logging  # noqa: F401
    from torch.distributed.elastic.utils.distributed import get_free_port

    import megatron.oellm.compat  # noqa: F401  (imported once, before the ranks fork)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--installed", action="store_true")
    parser.add_argument("values", type=float, nargs=len(MOE_LAYER_NUMBERS))
    args = parser.parse_args(argv)
    # forked ranks share this process's imports (no CUDA here): about half the start-up of spawned ones
    torch.multiprocessing.start_processes(rank_main, args=(get_free_port(), args.installed, args.values), nprocs=2,
                                          start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
