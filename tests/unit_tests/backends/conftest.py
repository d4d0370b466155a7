"""Fixtures of the backend tests."""

from collections.abc import Iterator

import pytest

from tests.unit_tests.cpu_megatron import gloo_world


@pytest.fixture
def world_of_one() -> Iterator[None]:
    """A gloo process group of one rank with megatron's parallel state (TP = PP = EP = 1): what megatron-core's
    parallel layers and checkpoint helpers ask for, on the CPU."""
    with gloo_world():
        yield
