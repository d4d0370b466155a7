"""Fixtures of the conversion tests: a tiny Qwen3-MoE card with random HF weights, on disk and converted."""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf


@pytest.fixture
def tiny_hf(tmp_path: Path) -> tuple[ModelCard, dict, Path]:
    """(card, random HF tensors, an empty directory to work in)."""
    card = get_card("qwen3-30b-a3b-tiny")
    return card, random_hf_tensors(card, seed=5), tmp_path


@pytest.fixture
def converted(tiny_hf) -> tuple[ModelCard, dict, Path]:
    """:func:`tiny_hf` with the tensors written to ``hf/`` (with the card's config.json) and converted to ``mcore/``."""
    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "mcore")
    return card, hf, tmp
