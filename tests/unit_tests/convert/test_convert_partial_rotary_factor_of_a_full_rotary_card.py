"""A Qwen3-MoE ``config.json`` stating a ``partial_rotary_factor`` other than 1.0 (in ``rope_parameters`` or at its top
level, which transformers moves there) describes a model that rotates part of each head, not the card's (Qwen3-MoE
rotates all of it): it is refused naming the field, its value and the card's, before any weight is read. Only the
RoPE fields the card's config states were compared, and Qwen3-MoE's states no fraction, so the config was accepted
and kept: megatron trained the weights with full RoPE, and the export's config, written back, rotated part of each
head."""

from __future__ import annotations

import json
import random

import pytest

from megatron.oellm.convert import safetensors_io
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import write_hf


def _partial_factor() -> float:
    """A fresh rotated fraction below full rotation, as partial-RoPE configs state them (a quarter, a half, ...)."""
    return random.choice([0.25, 0.5, 0.75, round(random.uniform(0.05, 0.95), 3)])


@pytest.mark.parametrize("place", ["rope_parameters", "top level"])
def test_a_partial_rotary_factor_is_refused_before_the_weights_are_read(tiny_hf, monkeypatch: pytest.MonkeyPatch,
                                                                        place: str) -> None:
    card, hf, tmp = tiny_hf
    path = write_hf(card, hf, tmp / "hf") / "config.json"
    config = json.loads(path.read_text())
    factor = _partial_factor()
    if place == "rope_parameters":
        config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": factor}
    else:
        config["partial_rotary_factor"] = factor
    path.write_text(json.dumps(config))
    read: list[str] = []
    monkeypatch.setattr(safetensors_io.SafetensorsSource, "__getitem__", lambda _, name: read.append(name))
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    assert f"rope_parameters.partial_rotary_factor: checkpoint {factor!r}, card 1.0" in str(refusal.value)
    assert read == []
    assert not (tmp / "out").exists()


def test_a_full_rotary_factor_stated_is_accepted(tiny_hf) -> None:
    """A config stating the full fraction (1.0), where transformers reads it, describes the card."""
    card, hf, tmp = tiny_hf
    path = write_hf(card, hf, tmp / "hf") / "config.json"
    config = json.loads(path.read_text())
    if random.choice([True, False]):
        config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": 1.0}
    else:
        config["partial_rotary_factor"] = 1.0
    path.write_text(json.dumps(config))
    hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    assert (tmp / "out").is_dir()
