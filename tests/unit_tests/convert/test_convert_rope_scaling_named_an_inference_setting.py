"""YaRN RoPE scaling in ``config.json`` (``rope_scaling``, as Qwen's model cards tell users to add for long contexts,
or ``rope_parameters`` of ``rope_type`` yarn) is an inference-time setting: where it is the only contradiction of
the card, the refusal says so and how to convert, instead of "no card of megatron-oellm fits it", and transformers'
warning about the scaling factor no longer reaches stderr (its logger's level is put back after). Beside another
contradiction, the refusal names every one: the scaling as an inference-time setting, the other field with the remedy
it gets alone (only the general refusal came, the scaling named as a field to change with the card)."""

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
                     "config.json without it (rope_scaling, or rope_parameters' rope_type and scaling fields)")
ADD_IT_BACK = f"{INFERENCE_SETTING}, and add it back to the config.json of the Hugging Face export"
INSIDE_ROPE_PARAMETERS = (f"{INFERENCE_SETTING}; its rope_scaling object replaces rope_parameters as transformers 5 "
                          "reads the config, so the fields of rope_parameters it leaves out take transformers' "
                          "defaults: in the Hugging Face export's config.json, put the scaling fields (rope_type "
                          "'yarn', factor, original_max_position_embeddings) inside rope_parameters, keeping its "
                          "rope_theta, rather than in a rope_scaling object")
NO_CARD_FITS = ("pick the card of this checkpoint with --model: no card of megatron-oellm fits it (`oellm models` "
                "lists them), so converting it needs a card of its own (megatron/oellm/cards.py)")


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


def test_yarn_alone_is_named_an_inference_setting_without_a_transformers_warning(converted) -> None:
    """Alone (within ``rope_parameters``: a ``rope_scaling`` object beside them replaces them, see
    :func:`test_yarn_in_a_rope_scaling_object_is_told_to_go_inside_rope_parameters`), YaRN is named an inference-time
    setting and transformers logs nothing (beside another contradiction, see
    :func:`test_yarn_beside_another_contradiction_names_both`)."""
    card, _, tmp = converted
    path = tmp / "hf" / "config.json"
    scaled = _with_yarn(json.loads(path.read_text()), "rope_parameters")
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
                                  f"'yarn', card 'default'; {ADD_IT_BACK}")
    assert [message for message in logged.messages if "factor" in message] == []
    assert not (tmp / "out").exists()


def test_yarn_in_a_rope_scaling_object_is_told_to_go_inside_rope_parameters(converted) -> None:
    """A ``rope_scaling`` object added to a config transformers 5 saved (``rope_theta`` inside ``rope_parameters``)
    replaces ``rope_parameters`` as transformers reads it: ``rope_theta`` falls back to 10000.0. Only ``rope_type``
    was named, and the advice to add the scaling back to the export as it was gave an export loading with the wrong
    RoPE base. Every contradicting field is named, and the advice put the scaling inside ``rope_parameters``; followed,
    transformers reads the card's ``rope_theta`` and YaRN."""
    from transformers import AutoConfig

    card, _, tmp = converted
    path = tmp / "hf" / "config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps(_with_yarn(saved, "rope_scaling")))
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    assert str(refusal.value) == (f"{path} does not describe card {card.name}: rope_parameters.rope_type: checkpoint "
                                  f"'yarn', card 'default'; rope_parameters.rope_theta: checkpoint 10000.0, card "
                                  f"{card.rotary_base!r}; {INSIDE_ROPE_PARAMETERS}")
    path.write_text(json.dumps(_with_yarn(saved, "rope_parameters")))  # the advice followed
    read = AutoConfig.from_pretrained(tmp / "hf").rope_parameters
    assert (read["rope_theta"], read["rope_type"]) == (card.rotary_base, "yarn")
    assert not (tmp / "out").exists()


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "llama3"])
def test_other_rope_scaling_is_refused_naming_the_field_not_as_an_inference_setting(converted, rope_type: str) -> None:
    """Linear (position interpolation) scaling is trained with, so only YaRN is named an inference-time setting:
    another ``rope_type`` gets the card's general refusal naming the field."""
    card, _, tmp = converted
    path = tmp / "hf" / "config.json"
    config = json.loads(path.read_text())
    scaling = {"rope_type": rope_type, "factor": round(random.uniform(1.5, 8), 3)}
    if rope_type == "llama3":
        scaling |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": config["max_position_embeddings"] // 2}
    path.write_text(json.dumps({**config, "rope_parameters": {**config["rope_parameters"], **scaling}}))
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    message = str(refusal.value)
    assert f"rope_parameters.rope_type: checkpoint {rope_type!r}, card 'default'" in message
    assert "inference-time" not in message
    assert not (tmp / "out").exists()


def test_yarn_in_a_multimodal_configs_text_config_is_named_an_inference_setting(tmp_path) -> None:
    """A multimodal config (Qwen3.5's) states its RoPE in ``text_config``: YaRN within its ``rope_parameters``, alone,
    is named an inference-time setting as at the top level of a text model's config (a ``rope_scaling`` object drops
    rope_theta, which the tests above cover)."""
    from transformers import Qwen3_5MoeConfig

    from megatron.oellm.cards import get_card
    from megatron.oellm.convert.family import family_module
    from megatron.oellm.convert.hf_config import check_hf_config

    card = get_card("qwen3.5-35b-a3b-tiny")
    text = family_module(card).hf_config_from_card(card).to_dict()
    del text["architectures"]
    Qwen3_5MoeConfig(text_config=text).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    check_hf_config(card, json.dumps(saved), "config.json")
    saved["text_config"] = _with_yarn(saved["text_config"], "rope_parameters")
    with pytest.raises(ConversionError) as refusal:
        check_hf_config(card, json.dumps(saved), "config.json")
    assert str(refusal.value) == (f"config.json does not describe card {card.name}: rope_parameters.rope_type: "
                                  f"checkpoint 'yarn', card 'default'; {ADD_IT_BACK}")


def _other_contradiction(config: dict, card_theta: float) -> tuple[dict, str]:
    """``config`` with a fresh contradiction of the card besides RoPE scaling (an activation, a norm epsilon or a RoPE
    base, none of them any card's), and the refusal's words for it."""
    kind = random.choice(["hidden_act", "rms_norm_eps", "rope_theta"])
    if kind == "hidden_act":
        act = random.choice(["gelu", "relu", "gelu_pytorch_tanh"])
        return {**config, "hidden_act": act}, f"hidden_act: checkpoint {act!r}, card 'silu'"
    if kind == "rms_norm_eps":
        eps = random.choice([1e-5, 1e-7, 3e-6])
        return {**config, "rms_norm_eps": eps}, f"rms_norm_eps: checkpoint {eps!r}, card {config['rms_norm_eps']!r}"
    theta = random.choice([base for base in (5e5, 2e6, 5e6) if base != card_theta])
    return ({**config, "rope_parameters": {**config["rope_parameters"], "rope_theta": theta}},
            f"rope_parameters.rope_theta: checkpoint {theta!r}, card {card_theta!r}")


@pytest.mark.parametrize("form", ["rope_parameters", "rope_scaling"])
def test_yarn_beside_another_contradiction_names_both(converted, form: str) -> None:
    """Within ``rope_parameters`` the scaling changes ``rope_type`` only; a ``rope_scaling`` object also drops
    ``rope_theta`` (read as 10000.0), so the advice puts the scaling inside ``rope_parameters``, and a RoPE base of
    its own is named by the value the config states."""
    card, _, tmp = converted
    path = tmp / "hf" / "config.json"
    other, named = _other_contradiction(json.loads(path.read_text()), card.rotary_base)
    path.write_text(json.dumps(_with_yarn(other, form)))
    with pytest.raises(ConversionError) as refusal:
        hf_to_mcore_checkpoint(card, tmp / "hf", tmp / "out")
    fields = ["rope_parameters.rope_type: checkpoint 'yarn', card 'default'"]
    if form == "rope_scaling" and not named.startswith("rope_parameters.rope_theta"):  # else the base it states
        fields.append(f"rope_parameters.rope_theta: checkpoint 10000.0, card {card.rotary_base!r}")
    advice = INSIDE_ROPE_PARAMETERS if form == "rope_scaling" else ADD_IT_BACK
    assert str(refusal.value) == (f"{path} does not describe card {card.name}: {'; '.join([*fields, named])}; "
                                  f"{advice}; beyond the scaling, {NO_CARD_FITS}")
    assert not (tmp / "out").exists()
