"""The flex token dispatcher's communication library, checked before Megatron initialises.

megatron-core 0.19.2 imports DeepEP / HybridEP lazily and raises only when it builds the MoE layers, after process
groups and GPU memory are set up (on a cluster: after the queue wait, on every rank). :func:`flex_dispatcher_problem`
finds the missing library from the parsed arguments, without importing it (``deep_ep`` initialises CUDA on import).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.doctor import deep_ep_declares_hybrid_ep

CONTAINER_HINT = "the image built with `--target hybridep` has it (docs/container.md)"


def flex_dispatcher_problem(args: Any) -> str | None:
    """Why the run's ``--moe-flex-dispatcher-backend`` cannot work in this environment, or None.

    Only runs with ``--moe-token-dispatcher-type flex`` are concerned: ``deepep`` needs the ``deep_ep`` package,
    ``hybridep`` its hybrid-ep branch (``deep_ep.HybridEPBuffer``), ``ncclep`` Transformer Engine's EP API.
    """
    if args.moe_token_dispatcher_type != "flex":
        return None
    backend = args.moe_flex_dispatcher_backend
    way_out = "or use --moe-token-dispatcher-type alltoall"
    if backend in ("deepep", "hybridep") and importlib.util.find_spec("deep_ep") is None:
        return (f"--moe-flex-dispatcher-backend {backend} needs DeepEP (the deep_ep package), which is not installed: "
                f"{CONTAINER_HINT}, {way_out}")
    if backend == "hybridep" and deep_ep_declares_hybrid_ep() is False:
        return ("--moe-flex-dispatcher-backend hybridep needs DeepEP's hybrid-ep branch (deep_ep.HybridEPBuffer); the "
                f"installed deep_ep does not have it: {CONTAINER_HINT}, {way_out}")
    if backend == "ncclep" and (te_error := transformer_engine_import_error()) is not None:
        return (f"--moe-flex-dispatcher-backend ncclep needs Transformer Engine's EP API, and Transformer Engine does "
                f"not import ({te_error}): choose deepep or hybridep, {way_out}")
    return None


def check_flex_dispatcher(args: Any) -> None:
    """Raise ValueError with :func:`flex_dispatcher_problem`'s reason, if any (the training entry calls it right
    after parsing, before Megatron allocates anything)."""
    problem = flex_dispatcher_problem(args)
    if problem:
        raise ValueError(problem)
