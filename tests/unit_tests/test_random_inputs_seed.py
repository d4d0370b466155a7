"""Each test's random inputs follow the session's seed (``OELLM_TEST_SEED``, printed in the summary) and its own id,
so that a failure on fresh random inputs can be drawn again, the test alone or in its session."""

from __future__ import annotations

import random

import pytest
import torch

from tests.unit_tests.random_inputs import seed_of_test


def test_the_generators_start_from_the_session_seed_and_the_test_id(request: pytest.FixtureRequest) -> None:
    seed = seed_of_test(request.config, request.node.nodeid)
    drawn, tensor = random.random(), torch.rand(5)
    assert drawn == random.Random(seed).random()
    assert torch.equal(tensor, torch.rand(5, generator=torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("case", range(2))
def test_two_tests_draw_different_inputs(case: int, request: pytest.FixtureRequest) -> None:
    """The seed differs per test id: two tests (here two cases of one) do not share their draws."""
    other = request.node.nodeid.replace(f"[{case}]", f"[{1 - case}]")
    mine, theirs = seed_of_test(request.config, request.node.nodeid), seed_of_test(request.config, other)
    assert mine != theirs and random.Random(mine).random() == random.random()
