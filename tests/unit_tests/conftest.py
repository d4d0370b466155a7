"""Fixtures shared by the unit tests: the one-process megatron-core runtime for GPU tests (see gpu_utils), the
process environment as each test found it, and the seed of the tests' random inputs."""

import os
import random
from collections.abc import Iterator
from unittest import mock

import pytest

from tests.unit_tests.gpu_utils import megatron_runtime, megatron_session, tf32_flags_restored
from tests.unit_tests.random_inputs import SEED_VARIABLE, SESSION_SEED, seed_generators, seed_of_test, session_seed

__all__ = ["megatron_runtime", "megatron_session", "process_environment_restored", "random_inputs_seeded",
           "tf32_flags_restored"]


def pytest_configure(config: pytest.Config) -> None:
    """Draw or read the session's seed before collection."""
    config.stash[SESSION_SEED] = session_seed()


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Seed Python's generator for each test module's import from the session's seed and the module's id: the draws
    at collection (random parameters, which name the tests) are then the same whichever modules a run collects."""
    if isinstance(collector, pytest.Module):
        random.seed(seed_of_test(collector.config, collector.nodeid))


def _seed_line(config: pytest.Config) -> str:
    """The line that names the session's seed."""
    return f"random inputs: {SEED_VARIABLE}={config.stash[SESSION_SEED]} draws this session's again"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Name the seed first too (also under ``-q``): a run killed before its summary (a time limit, a hang, a crash)
    keeps it."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(_seed_line(session.config))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Name the seed again last, where a reader of a failed run looks."""
    terminalreporter.write_line(_seed_line(config))


@pytest.fixture(autouse=True, scope="module")
def module_inputs_seeded(request: pytest.FixtureRequest) -> None:
    """Per-module fixture, set up before a module's other module-scoped fixtures: Python's, torch's CPU and the GPUs'
    default generators seeded from the session's seed and the module's id, so a module fixture's draws (a checkpoint's random weights, a
    vocabulary size) do not depend on which modules ran before it."""
    seed_generators(request.config, request.node.nodeid)


@pytest.fixture(autouse=True)
def random_inputs_seeded(request: pytest.FixtureRequest) -> None:
    """Per-test fixture: Python's, torch's CPU and the GPUs' default generators seeded from the session's seed and the
    test's id, so that one test rerun alone (``pytest NODEID`` with ``OELLM_TEST_SEED``) draws the inputs it drew in
    the full session. A test that asks for ``megatron_runtime`` (``gpu_utils``) gets megatron-core's RNG tracker
    seeded from the same test seed."""
    seed_generators(request.config, request.node.nodeid)


@pytest.fixture(autouse=True)
def process_environment_restored() -> Iterator[None]:
    """Per-test fixture: ``os.environ`` is put back as the test found it. Code under test writes to it directly, not
    through ``monkeypatch``: megatron-core's ``LanguageModule`` exports ``NVTE_FLASH_ATTN``, ``NVTE_FUSED_ATTN`` and
    ``NVTE_UNFUSED_ATTN`` for the attention backend of every model it builds, and a later test's start-up check (the
    recipe's ``--local`` refusal, megatron-core's own assertion on those switches) would read them as a job's."""
    with mock.patch.dict(os.environ):  # on leaving, every variable has its value from the start again
        yield


@pytest.fixture(autouse=True, scope="module")
def process_environment_restored_per_module() -> Iterator[None]:
    """Per-module fixture: ``os.environ`` is put back as the module found it, for what a module-scoped fixture writes
    there outside every test's :func:`process_environment_restored` (a checkpoint saved once per module builds a model,
    whose ``NVTE_*`` exports then met the next module's tests: the recipe's ``--local`` refusal read them as the
    job's when the training folder ran before the recipes folder)."""
    with mock.patch.dict(os.environ):
        yield
