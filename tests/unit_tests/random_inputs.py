"""The seed of the tests' random inputs: one per session (``OELLM_TEST_SEED``, or a fresh one), and from it one per
test, so that a failure on fresh random inputs can be drawn again, the test alone or in its session."""

from __future__ import annotations

import os
import random
import zlib

import pytest
import torch

SEED_VARIABLE = "OELLM_TEST_SEED"
"""Environment variable that fixes the session's seed, to draw a failed run's random inputs again."""

SESSION_SEED = pytest.StashKey[int]()
"""Where the session's seed is kept in pytest's config."""


def session_seed() -> int:
    """The seed of this session's random inputs: ``OELLM_TEST_SEED``, else a fresh one (the tests draw new inputs
    each session, and the summary names the seed that reproduces them)."""
    given = os.environ.get(SEED_VARIABLE)
    if given is None:
        return random.SystemRandom().randrange(2**32)
    try:
        return int(given)
    except ValueError:
        raise pytest.UsageError(f"{SEED_VARIABLE}={given!r}: give an integer, e.g. the one a failed run's summary "
                                "printed") from None


def seed_of_test(config: pytest.Config, nodeid: str) -> int:
    """The seed of one test (or of one module's collection): the session's and the id together (two tests draw
    different inputs, and a test rerun alone draws what it drew in the full session)."""
    return zlib.crc32(f"{config.stash[SESSION_SEED]}:{nodeid}".encode())


def seed_generators(config: pytest.Config, nodeid: str) -> None:
    """Seed Python's, torch's CPU and every GPU's default generator with :func:`seed_of_test` of ``nodeid`` (a test's
    or a module's id), so a GPU test's ``torch.randn(..., device="cuda")`` draws fresh inputs each session that
    ``OELLM_TEST_SEED`` draws again. The CUDA seeding is queued until CUDA initialises (no GPU is touched here).
    megatron-core's RNG tracker keeps its own states: the ``megatron_runtime`` fixture seeds those (and torch's again)
    from the same :func:`seed_of_test`."""
    seed = seed_of_test(config, nodeid)
    random.seed(seed)
    torch.random.default_generator.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
