"""One-process megatron-core runtime for GPU tests: torch.distributed, model-parallel groups and RNG.

megatron-core modules need ``torch.distributed`` and ``megatron.core.parallel_state`` to be initialised even on a
single GPU (parallel linears ask for their tensor-parallel group, weight init asks for the model-parallel RNG
tracker). ``tests/unit_tests/conftest.py`` exposes the fixtures below to every test under ``tests/unit_tests``::

    @pytest.mark.gpu
    def test_x(megatron_runtime): ...

The runtime itself is :mod:`megatron.oellm.runtime` (the bench uses it too); test modules import
``init_megatron_runtime`` / ``reseed`` from here. Initialisation happens once per process (world size 1, rank 0,
NCCL); later calls only re-seed.
"""

from collections.abc import Iterator

import pytest
import torch

from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.runtime import init_single_gpu_runtime as init_megatron_runtime
from megatron.oellm.runtime import reseed
from tests.unit_tests.random_inputs import seed_of_test

__all__ = ["BACKENDS", "TE_BACKEND", "init_megatron_runtime", "megatron_runtime", "megatron_session",
           "no_tf32", "reseed", "tf32_flags_restored"]

TE_BACKEND = pytest.param("te", id="te", marks=pytest.mark.skipif(
    transformer_engine_import_error() is not None,
    reason="Transformer Engine does not import here (tools/te_site_bundle.sh carries it to a GPU machine)"))
"""The Transformer Engine backend as a pytest parameter, skipped where TE does not import."""
BACKENDS = [pytest.param("torch", id="torch"), TE_BACKEND]
"""Both compute backends as a pytest parameter."""


def no_tf32() -> None:
    """Full fp32 matmuls and convolutions in this process (torch's TF32 switches off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@pytest.fixture
def tf32_flags_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-test fixture: torch's TF32 switches get their current values back after the test, whatever it sets."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", torch.backends.cuda.matmul.allow_tf32)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", torch.backends.cudnn.allow_tf32)


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
def megatron_runtime(megatron_session: None, request: pytest.FixtureRequest) -> None:
    """Per-test fixture: runtime up (see :func:`megatron_session`) and torch's and megatron-core's RNG tracker
    re-seeded from the test's seed (:func:`random_inputs.seed_of_test`): a model's initial weights and the test's
    inputs are new each session, and the same again under that session's ``OELLM_TEST_SEED``."""
    reseed(seed_of_test(request.config, request.node.nodeid))
