"""The one-process megatron-core runtime: what megatron-core modules need before they can be built on one GPU.

megatron-core modules ask for ``torch.distributed`` and ``megatron.core.parallel_state`` even on a single GPU
(parallel linears look up their tensor-parallel group, weight init uses the model-parallel RNG tracker). The bench
and the GPU tests bring it up here; training runs get it from ``megatron.training``'s own initialisation. The bench
shuts it down before it exits, so PyTorch's NCCL teardown does not warn about a leaked process group.
"""

from __future__ import annotations

import torch
from torch.distributed.elastic.utils.distributed import get_free_port as free_port

DEFAULT_SEED = 1234
"""Seed of torch and megatron-core's model-parallel RNG tracker at initialisation."""


def reseed(seed: int = DEFAULT_SEED) -> None:
    """Seed torch (CPU and CUDA) and megatron-core's CUDA RNG tracker, so module init is reproducible."""
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed, force_reset_rng=True)


def init_single_gpu_runtime(seed: int = DEFAULT_SEED) -> None:
    """A one-rank NCCL process group, model-parallel groups of size 1 and seeded RNGs, once per process.

    Idempotent: with the runtime already up it only re-seeds. Raises without CUDA. The process group meets on this
    host at a free port, never at ``MASTER_ADDR``/``MASTER_PORT``: a SLURM job script often presets those for a
    multi-node run, and this one process would otherwise wait out the rendezvous timeout on another node's address
    or fail on a port already taken here. The environment is left as it is.
    """
    from megatron.core import parallel_state

    if not torch.cuda.is_available():
        raise RuntimeError("the megatron-core runtime needs a CUDA device")
    if not torch.distributed.is_initialized():
        torch.cuda.set_device(0)
        torch.distributed.init_process_group(
            backend="nccl", init_method=f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel()
    reseed(seed)


def shutdown_single_gpu_runtime() -> None:
    """Undo :func:`init_single_gpu_runtime`: megatron-core's model-parallel groups, then the process group.

    A process that exits with its NCCL process group alive gets PyTorch's "destroy_process_group() was not called"
    warning (and may leak NCCL resources). Safe to call when nothing, or only part, is up.
    """
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
