"""Each test's random inputs follow the session's seed (``OELLM_TEST_SEED``, printed in the summary) and its own id,
so that a failure on fresh random inputs can be drawn again, the test alone or in its session."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.unit_tests.random_inputs import SESSION_SEED, seed_generators, seed_of_test


def test_the_generators_start_from_the_session_seed_and_the_test_id(request: pytest.FixtureRequest) -> None:
    seed = seed_of_test(request.config, request.node.nodeid)
    drawn, tensor = random.random(), torch.rand(5)
    assert drawn == random.Random(seed).random()
    assert torch.equal(tensor, torch.rand(5, generator=torch.Generator().manual_seed(seed)))


def test_the_seeding_reaches_every_gpus_generator(request: pytest.FixtureRequest,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's seed goes to every GPU's default generator too (queued until CUDA initialises, so nothing is
    touched on a CPU machine)."""
    seeded: list[int] = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded.append)
    seed_generators(request.config, request.node.nodeid)
    assert seeded == [seed_of_test(request.config, request.node.nodeid)]


@pytest.mark.parametrize("case", range(2))
def test_two_tests_draw_different_inputs(case: int, request: pytest.FixtureRequest) -> None:
    """The seed differs per test id: two tests (here two cases of one) do not share their draws."""
    other = request.node.nodeid.replace(f"[{case}]", f"[{1 - case}]")
    mine, theirs = seed_of_test(request.config, request.node.nodeid), seed_of_test(request.config, other)
    assert mine != theirs and random.Random(mine).random() == random.random()


SEED_SOURCE = Path(__file__).resolve().parent / "random_inputs.py"
"""Where the session's seed is drawn from the operating system, when ``OELLM_TEST_SEED`` does not give it."""

UNSEEDED = r"\bRandom\(\)|\btorch\.seed\(\)|\bos\.urandom\(|\bSystemRandom\("
"""Draws the session's seed does not reach: ``random.Random()`` and ``SystemRandom`` take the operating system's
randomness, ``torch.seed()`` reseeds torch's generator from it, ``os.urandom`` reads it."""


def test_no_test_draws_from_an_unseeded_generator() -> None:
    """Draws from the operating system's randomness (:data:`UNSEEDED`) escape the session's seed: a failure on them
    could not be drawn again. A test's generators and bytes come from the seeded generator instead; the session's
    own seed (``random_inputs.py``) is the one draw that may not."""
    tests = Path(__file__).resolve().parent
    unseeded = [f"{path.relative_to(tests)}:{number}" for path in sorted(tests.rglob("*.py"))
                for number, line in enumerate(path.read_text().splitlines(), 1)
                if re.search(UNSEEDED, line) and path not in (Path(__file__).resolve(), SEED_SOURCE)]
    assert not unseeded, (f"unseeded draws: {', '.join(unseeded)}; use random.Random(random.random()), "
                          "random.randrange(2**31) for a torch seed, random.randbytes(n)")


def test_draws_printed_for_the_replay_check(request: pytest.FixtureRequest) -> None:
    """Prints this test's first draws (read by :func:`test_the_session_seed_replays_a_test_alone_or_in_a_session`)."""
    print(f"DRAWS {random.random()!r} {torch.rand(3).tolist()!r} {request.config.stash[SESSION_SEED]}")


def _draws(seed: int, *targets: str) -> list[str]:
    """The DRAWS and seed lines of a pytest run of ``targets`` under ``OELLM_TEST_SEED=seed``."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *targets],
                          cwd=root, env={**os.environ, "OELLM_TEST_SEED": str(seed)}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return re.findall(r"DRAWS .*|random inputs: .*", done.stdout)  # -s: a DRAWS line may follow progress dots


def test_the_session_seed_replays_a_test_alone_or_in_a_session() -> None:
    """The same ``OELLM_TEST_SEED`` gives a test the same draws run alone, after another module, and again; another
    seed gives others; the run names the seed it was given, first and last."""
    seed = random.randrange(2**32)
    this = f"{Path(__file__).relative_to(Path(__file__).resolve().parents[2])}"
    alone = _draws(seed, f"{this}::test_draws_printed_for_the_replay_check")
    after_another = _draws(seed, "tests/unit_tests/test_tables_scaling_kind.py",
                           f"{this}::test_draws_printed_for_the_replay_check")
    assert alone == after_another == _draws(seed, f"{this}::test_draws_printed_for_the_replay_check")
    named = f"random inputs: OELLM_TEST_SEED={seed} draws this session's again"
    assert alone[0] == alone[-1] == named and alone[1].endswith(f" {seed}")
    assert _draws(seed + 1, f"{this}::test_draws_printed_for_the_replay_check")[1] != alone[1]
