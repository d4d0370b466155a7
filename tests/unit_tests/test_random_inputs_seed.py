"""Each test's random inputs follow the session's seed (``OELLM_TEST_SEED``, printed in the summary) and its own id,
so that a failure on fresh random inputs can be drawn again, the test alone or in its session."""

from __future__ import annotations

import random
import re
from pathlib import Path

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


def test_no_test_draws_from_an_unseeded_generator() -> None:
    """``random.Random()`` seeds itself from the operating system, so its draws escape the session's seed: a failure on
    them could not be drawn again. Each test's own generator starts from the seeded one instead."""
    tests = Path(__file__).resolve().parent
    unseeded = [f"{path.relative_to(tests)}:{number}" for path in sorted(tests.rglob("*.py"))
                for number, line in enumerate(path.read_text().splitlines(), 1)
                if re.search(r"\brandom\.Random\(\)|\bRandom\(\)", line) and path != Path(__file__).resolve()]
    assert not unseeded, f"unseeded generators: {', '.join(unseeded)}; use random.Random(random.random())"
