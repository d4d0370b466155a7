"""YaRN RoPE scaling in ``config.json`` (``rope_scaling``, as Qwen's model cards tell users to add for long contexts,
or ``rope_parameters`` of ``rope_type`` yarn) is an inference-time setting: where it is the only contradiction of
the card, the refusal says so and how to convert, instead of "no card of megatron-oellm fits it", and transformers'
warning about the scaling factor no longer reaches stderr (its logger's level is put back after)."""

from __future__ import annotations

import json
import logging
import random

import pytest
from transformers.utils import logging as transformers_logging

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint

INFERENCE_SETTING = ("RoPE scaling (rope_type 'yarn', as Qwen's model cards suggest for contexts past the trained "
                     "length) is an inference-time setting, not part of the weights: convert with a copy of "
                     "config.json without it (rope_scaling, or rope_parameters' rope_type and scaling fields), and "
                     "add it back to the config.json of the Hugging Face export")


class _Messages(logging.Handler):
    """Collects the messages of the records it handles (transformers' logger does not propagate to pytest's)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _with_yarn(config: dict, form: str) -> dict:
    """``config`` (a saved ``config.json``) with YaRN scaling of a fresh factor, in ``form``: a ``rope_scaling`` object
    beside the ``rope_parameters`` transformers 5 writes, or within ``rope_parameters``."""
    yarn = {"rope_type": "yarn", "factor": round(random.uniform(1.5, 8), 3),
            "original_max_position_embeddings": config["max_position_embeddings"] * random.choice([2, 4, 8])}
    if form == "rope_scaling":
        return {**config, "rope_scaling": yarn}
    return {**config, "rope_parameters": {**config["rope_parameters"], **yarn}}


@pytest.mark.parametrize("form", ["rope_scaling", "rope_parameters"])
def test_yarn_alone_is_named_an_inference_setting_without_a_transformers_warning(converted, form: str) -> None:
    """Alone, YaRN is named an inference-time setting and transformers logs nothing; beside another contradiction
    (an activation), the card's refusal stays as it was."""
    card, _, tmp = converted
    path = tmp / "hf" / "config.json"
    scaled = _with_yarn(json.loads(path.read_text()), form)
    path.write_text(json.dumps(scaled))
    given = random.choice([transformers_logging.INFO, transformers_logging.WARNING])
    before = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity(given)
    logged = _Messages()
    transformers_logging.get_logger().addHandler(logged)
    try:
        with pytest.raises(ConversionError) as refusal:
            hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
        assert transformers_logging.get_verbosity() == given
    finally:
        transformers_logging.get_logger().removeHandler(logged)
        transformers_logging.set_verbosity(before)
    assert str(refusal.value) == (f"{path} does not describe card {card.name}: rope_parameters.rope_type: checkpoint "
                                  f"'yarn', card 'default'; {INFERENCE_SETTING}")
    assert [message for message in logged.messages if "factor" in message] == []
    path.write_text(json.dumps({**scaled, "hidden_act": "gelu"}))
    with pytest.raises(ConversionError, match=r"hidden_act: checkpoint 'gelu', card 'silu'.*pick the card") as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    assert "inference-time" not in str(refusal.value)
    assert not (tmp / "out").exists()
