"""Shared fixtures of the recipe tests: the example configs and megatron-core's own argument parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron.oellm.megatron_args import megatron_parser

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "oellm"
CONFIGS = sorted(p for p in EXAMPLES.glob("*.toml") if not p.name.startswith("_"))


@pytest.fixture(scope="session")
def parse_megatron():
    """Parse an argv with megatron-core 0.19.2's parser (built once: it is slow to build)."""
    parser = megatron_parser()
    return lambda argv: parser.parse_args(list(argv))
