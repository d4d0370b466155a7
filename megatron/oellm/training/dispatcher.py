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


def enable_deepep_problem(args: Any) -> str | None:
    """Why the deprecated ``--moe-enable-deepep`` cannot be combined with the run's dispatcher flags, or None:
    megatron-core 0.19.2's ``TransformerConfig`` refuses it without ``--moe-token-dispatcher-type flex`` or next to
    ``--moe-flex-dispatcher-backend hybridep`` (when it builds the model's config, after initialising)."""
    if not getattr(args, "moe_enable_deepep", False):
        return None
    if args.moe_token_dispatcher_type != "flex":
        return (f"--moe-enable-deepep needs --moe-token-dispatcher-type flex (got "
                f"{args.moe_token_dispatcher_type}); drop it, or use --moe-token-dispatcher-type flex "
                f"--moe-flex-dispatcher-backend deepep")
    if args.moe_flex_dispatcher_backend == "hybridep":
        return ("--moe-enable-deepep selects the deepep backend and cannot be combined with "
                "--moe-flex-dispatcher-backend hybridep: drop --moe-enable-deepep")
    return None


def effective_backend(args: Any) -> str:
    """The flex backend megatron-core builds: ``deepep`` under the deprecated ``--moe-enable-deepep`` (its
    ``TransformerConfig`` overrides ``--moe-flex-dispatcher-backend`` with it), else that flag's value."""
    return "deepep" if getattr(args, "moe_enable_deepep", False) else args.moe_flex_dispatcher_backend


def expert_group_problem(args: Any, backend: str) -> str | None:
    """Why ``backend`` cannot dispatch over the run's expert layout, or None: megatron-core 0.19.2's
    ``MoEFlexTokenDispatcher`` asserts, for ``deepep`` and ``ncclep``, that the expert tensor size x expert size is
    above 1 (its TP x EP group), failing as it builds the MoE layers on every rank."""
    if backend not in ("deepep", "ncclep"):
        return None
    etp = getattr(args, "expert_tensor_parallel_size", None) or args.tensor_model_parallel_size
    ep = args.expert_model_parallel_size
    if (etp or 1) * (ep or 1) > 1:
        return None
    return (f"--moe-flex-dispatcher-backend {backend} needs more than one rank in the expert tensor x expert "
            f"parallel group (megatron-core asserts TPxEP > 1; this run has --expert-tensor-parallel-size {etp or 1} "
            f"and --expert-model-parallel-size {ep or 1}): raise --expert-model-parallel-size, use "
            f"--moe-flex-dispatcher-backend hybridep, or --moe-token-dispatcher-type alltoall")


def flex_dispatcher_problem(args: Any) -> str | None:
    """Why the run's ``--moe-flex-dispatcher-backend`` cannot work in this environment or layout, or None.

    Only runs with ``--moe-token-dispatcher-type flex`` (or ``--moe-enable-deepep``, :func:`enable_deepep_problem`)
    are concerned: ``deepep`` needs the ``deep_ep`` package, ``hybridep`` its hybrid-ep branch
    (``deep_ep.HybridEPBuffer``), ``ncclep`` Transformer Engine's EP API; ``deepep`` and ``ncclep`` also more than
    one expert rank (:func:`expert_group_problem`). The backend is the one megatron builds
    (:func:`effective_backend`).
    """
    if args.moe_token_dispatcher_type == "flex" and enable_deepep_problem(args) is None:
        if (problem := library_problem(effective_backend(args))) is not None:
            return problem
    return flex_layout_problem(args)


def library_problem(backend: str) -> str | None:
    """Why the flex ``backend`` cannot load its communication library in this environment, or None: ``deepep`` needs
    the ``deep_ep`` package, ``hybridep`` its hybrid-ep branch, ``ncclep`` Transformer Engine's EP API."""
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


def flex_layout_problem(args: Any) -> str | None:
    """The part of :func:`flex_dispatcher_problem` that needs no library, or None: the dispatcher flags' own
    contradictions (:func:`enable_deepep_problem`) and an expert layout the flex backend cannot dispatch over
    (:func:`expert_group_problem`). They are the same on every node, so a login node without DeepEP or Transformer
    Engine checks them too."""
    if (problem := enable_deepep_problem(args)) is not None:
        return problem
    if args.moe_token_dispatcher_type != "flex":
        return None
    return expert_group_problem(args, effective_backend(args))


def check_flex_layout(args: Any) -> None:
    """Raise ValueError with :func:`flex_layout_problem`'s reason, if any (the training entry on a node without a
    GPU, where this node's DeepEP and Transformer Engine say nothing of the cluster's)."""
    problem = flex_layout_problem(args)
    if problem:
        raise ValueError(problem)


def check_flex_dispatcher(args: Any) -> None:
    """Raise ValueError with :func:`flex_dispatcher_problem`'s reason, if any (the training entry calls it right
    after parsing, before Megatron allocates anything)."""
    problem = flex_dispatcher_problem(args)
    if problem:
        raise ValueError(problem)
