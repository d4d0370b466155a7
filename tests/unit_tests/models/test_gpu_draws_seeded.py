"""The models' GPU tests draw fresh random weights and inputs each session, and ``OELLM_TEST_SEED`` draws them again:
the GPUs' default generator starts from each test's seed (``tests/unit_tests/random_inputs.py``), and so does
megatron-core's RNG tracker under the ``megatron_runtime`` fixture."""

from __future__ import annotations

import pytest
import torch

from megatron.oellm.runtime import DEFAULT_SEED
from tests.unit_tests.gpu_utils import reseed
from tests.unit_tests.random_inputs import seed_of_test


@pytest.mark.gpu
def test_a_gpu_draw_starts_from_the_test_seed(request: pytest.FixtureRequest) -> None:
    """A GPU test's first ``torch.rand(..., device="cuda")`` is the test seed's, whether or not CUDA was initialised
    by an earlier test."""
    seed = seed_of_test(request.config, request.node.nodeid)
    drawn = torch.rand(5, device="cuda")
    assert torch.equal(drawn, torch.rand(5, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)))


def _tracker_draw() -> torch.Tensor:
    """Five numbers drawn inside megatron-core's model-parallel RNG state, where it initialises tensor-parallel
    weights."""
    from megatron.core.tensor_parallel import get_cuda_rng_tracker

    with get_cuda_rng_tracker().fork():
        return torch.rand(5, device="cuda")


@pytest.mark.gpu
def test_megatron_runtime_seeds_the_rng_tracker_from_the_test_seed(megatron_runtime: None,
                                                                   request: pytest.FixtureRequest) -> None:
    """Under ``megatron_runtime`` a model's initial weights come from the test's seed (new each session, drawn again
    under ``OELLM_TEST_SEED``), not from megatron's fixed ``DEFAULT_SEED``."""
    first = _tracker_draw()
    reseed(seed_of_test(request.config, request.node.nodeid))
    assert torch.equal(_tracker_draw(), first)
    reseed(DEFAULT_SEED)
    assert not torch.equal(_tracker_draw(), first)
