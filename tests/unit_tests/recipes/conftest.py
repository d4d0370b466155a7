"""Shared fixtures of the recipe tests: megatron-core's own argument parser (the helpers, the example configs and a
fake ``sbatch``, are in :mod:`recipe_helpers`)."""

from __future__ import annotations

import pytest

from megatron.oellm.training.args import oellm_parser


@pytest.fixture(scope="session")
def parse_megatron():
    """Parse an argv with the training entry's parser, megatron-core 0.19.2's plus ``--oellm-*`` (built once: it is
    slow to build)."""
    parser = oellm_parser()
    return lambda argv: parser.parse_args(list(argv))
