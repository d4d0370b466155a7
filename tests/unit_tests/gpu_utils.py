"""One-process megatron-core runtime for GPU tests: torch.distributed, model-parallel groups and RNG.

megatron-core modules need ``torch.distributed`` and ``megatron.core.parallel_state`` to be initialised even on a
single GPU (parallel linears ask for their tensor-parallel group, weight init asks for the model-parallel RNG
tracker). ``tests/unit_tests/conftest.py`` exposes the fixtures below to every test under ``tests/unit_tests``::

    @pytest.mark.gpu
    def test_x(megatron_runtime): ...

Test modules that need the functions import them as ``from gpu_utils import reseed`` (pytest puts
``tests/unit_tests`` on ``sys.path`` when it loads that conftest). Initialisation happens once per process (world size 1, rank 0,
NCCL); later calls are no-ops, and :func:`reseed` re-seeds torch and megatron's CUDA RNG tracker between tests.
"""

import os
import socket
from collections.abc import Iterator

import pytest
import torch

DEFAULT_SEED = 1234
"""Seed used for torch and megatron-core's model-parallel RNG tracker at initialisation."""


def _free_port() -> int:
    """Return a TCP port on localhost that is free right now (for the process-group rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reseed(seed: int = DEFAULT_SEED) -> None:
    """Seed torch (CPU and CUDA) and megatron-core's CUDA RNG tracker, so module init is reproducible."""
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed, force_reset_rng=True)


def init_megatron_runtime(seed: int = DEFAULT_SEED) -> None:
    """Initialise torch.distributed (NCCL, one process) and megatron-core's parallel state once per process.

    Idempotent: a second call with the runtime already up only re-seeds. World size 1, so every parallel size
    (TP, PP, CP, EP) is 1; multi-GPU tests launch their own ranks with torchrun.
    """
    from megatron.core import parallel_state

    if not torch.cuda.is_available():
        raise RuntimeError("init_megatron_runtime needs a CUDA device; mark the test with @pytest.mark.gpu")
    if not torch.distributed.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        torch.cuda.set_device(0)
        torch.distributed.init_process_group(backend="nccl", world_size=1, rank=0)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel()
    reseed(seed)


@pytest.fixture(scope="session")
def megatron_session() -> Iterator[None]:
    """Session fixture: bring the one-process megatron-core runtime up once and tear it down at the end."""
    init_megatron_runtime()
    yield
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.fixture
def megatron_runtime(megatron_session: None) -> None:
    """Per-test fixture: runtime up (see :func:`megatron_session`) and RNGs re-seeded to :data:`DEFAULT_SEED`."""
    reseed(DEFAULT_SEED)
