"""The models' GPU tests draw fresh random weights and inputs each session, and ``OELLM_TEST_SEED`` draws them again:
the GPUs' default generator starts from each test's seed (``tests/unit_tests/random_inputs.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.unit_tests.random_inputs import seed_of_test


@pytest.mark.gpu
def test_a_gpu_draw_starts_from_the_test_seed(request: pytest.FixtureRequest) -> None:
    """A GPU test's first ``torch.rand(..., device="cuda")`` is the test seed's, whether or not CUDA was initialised
    by an earlier test."""
    seed = seed_of_test(request.config, request.node.nodeid)
    drawn = torch.rand(5, device="cuda")
    assert torch.equal(drawn, torch.rand(5, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)))
