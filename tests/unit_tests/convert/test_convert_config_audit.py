"""Mutation audit of the conversion's checks and layout (session 39): each test pins a behaviour whose loss would let a
conversion write a silently wrong checkpoint or refuse a good one, and that no earlier test held."""

from __future__ import annotations

import errno
import json
import os
import random
import re
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert import mcore_layout
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.hf_config import check_hf_config
from megatron.oellm.convert.output import storage_error_behind
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import raised_while_writing, random_hf_tensors, write_hf

QWEN3, QWEN35 = "qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"


def _card_config(name: str) -> dict:
    """The ``config.json`` fields transformers writes for card ``name``."""
    card = get_card(name)
    return json.loads(family_module(card).hf_config_from_card(card).to_json_string())


def _other_value(value: object) -> object:
    """A valid value of the same type as ``value`` that differs from it (fresh each call)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * random.choice([2, 4])
    if isinstance(value, float):
        return random.choice([eps for eps in (1e-5, 1e-6, 1e-7, 1e-8) if eps != value])
    assert isinstance(value, list), value
    return list(reversed(value))


_COMMON_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                        "head_dim", "num_experts", "moe_intermediate_size", "tie_word_embeddings",
                        "num_experts_per_tok", "rms_norm_eps")
"""Shape fields both families' transformers config classes have (listed here, not taken from the code under test)."""
_SHAPE_FIELDS = {QWEN3: (*_COMMON_SHAPE_FIELDS, "norm_topk_prob"),
                 QWEN35: (*_COMMON_SHAPE_FIELDS, "shared_expert_intermediate_size", "linear_num_key_heads",
                          "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                          "linear_conv_kernel_dim", "layer_types")}


@pytest.mark.parametrize(("name", "field"), [(name, field) for name, fields in _SHAPE_FIELDS.items() for field in fields])
def test_every_shape_field_the_card_describes_is_compared(name: str, field: str) -> None:
    """A ``config.json`` stating another value for any shape field the card's config class has (routing width, norm
    epsilon, layer types, GDN head sizes, ...) is refused naming that field with both values: the config is kept and
    written back with the export, so a field left out of the comparison would ship an HF model that computes other
    than the converted weights (or does not load them). Fails if a field is dropped from the compared set."""
    card = get_card(name)
    config = _card_config(name)
    expected = family_module(card).hf_config_from_card(card)
    stored_as = field if field in config else type(expected).attribute_map.get(field, field)
    assert stored_as in config, f"transformers writes no {field} for {name}"
    card_value = getattr(expected, field)
    config[stored_as] = changed = _other_value(card_value)
    if field == "num_hidden_layers" and "layer_types" in config:  # transformers checks their count against it
        config["layer_types"] = (config["layer_types"] * changed)[:changed]
    with pytest.raises(ConversionError) as raised:
        check_hf_config(card, json.dumps(config), "config.json")
    assert f"{field}: checkpoint {changed!r}, card {card_value!r}" in str(raised.value)


@pytest.mark.parametrize("name", [QWEN3, QWEN35])
def test_a_vocabulary_left_out_of_the_config_asks_to_state_it_not_for_vocab_size(name: str) -> None:
    """A ``config.json`` without ``vocab_size`` reads as the config class's default vocabulary, not the card's: that is
    a field to state, not a vocabulary of the checkpoint's own, so the refusal must not advise ``--vocab-size`` with
    the class default (converting with it would then fail on every vocabulary tensor's rows)."""
    card = get_card(name)
    config = _card_config(name)  # every other field as the card has it
    del config["vocab_size"]
    default = type(family_module(card).hf_config_from_card(card))().vocab_size
    assert default != card.vocab_size
    with pytest.raises(ConversionError) as raised:
        check_hf_config(card, json.dumps(config), "config.json")
    message = str(raised.value)
    assert f"vocab_size: checkpoint {default}, card {card.vocab_size} (not stated in the config" in message
    assert "state the fields it leaves out in config.json" in message
    assert "--vocab-size" not in message


@pytest.mark.parametrize(("text", "message"), [("[1, 2]", "holds a JSON list, not an object"),
                                               ('{"temperature": ', "is not valid JSON")])
def test_a_generation_config_that_is_no_json_object_is_refused_before_writing(tmp_path: Path, text: str,
                                                                              message: str) -> None:
    """``generation_config.json`` is kept verbatim with the megatron checkpoint and written back by mcore-to-hf: a
    damaged one must be refused up front, naming the file, not carried into an export whose ``generate`` fails."""
    card = get_card(QWEN3)
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    (tmp_path / "hf" / "generation_config.json").write_text(text)
    with pytest.raises(ConversionError, match=message) as raised:
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert "generation_config.json" in str(raised.value)
    assert not (tmp_path / "mcore").exists()


def test_gdn_conv_weight_is_stored_as_megatrons_query_key_value_sections() -> None:
    """megatron-core's GatedDeltaNet stores ``conv1d.weight`` as three global tensors ``conv1d.weight.query`` /
    ``.key`` / ``.value`` of (key width, key width, value width) rows, in that order (it shards each over TP on its
    own). The round trip through our own reader cannot see a swap of two sections (it reads back what it wrote), but
    megatron would load key channels as value channels: pinned here against the card's widths (value heads twice the
    key heads on the tiny card, so a swap changes the shapes)."""
    card = get_card(QWEN35)
    qk, v = card.linear_num_key_heads * card.linear_key_head_dim, card.linear_num_value_heads * card.linear_value_head_dim
    assert qk != v
    layer, kernel = random.randrange(card.num_layers), card.linear_conv_kernel_dim
    name = f"decoder.layers.{layer}.self_attention.conv1d.weight"
    sections = mcore_layout.pieces(card, "hybrid", name, (2 * qk + v, 1, kernel))
    assert [(p.key, p.global_shape, p.offset, p.rows) for p in sections] == [
        (f"{name}.query", (qk, 1, kernel), (0, 0, 0), (0, qk)),
        (f"{name}.key", (qk, 1, kernel), (0, 0, 0), (qk, 2 * qk)),
        (f"{name}.value", (v, 1, kernel), (0, 0, 0), (2 * qk, 2 * qk + v))]


def test_a_data_file_one_byte_short_is_named_before_anything_is_read(converted) -> None:
    """A copy of a megatron checkpoint that lost only the last byte of one data file (a fresh one of several items) is
    named up front (file, size, the end ``.metadata`` promises), not met half-way through a conversion: the bound is
    exact and is the end of the file's last item."""
    _, _, tmp = converted
    directory = tmp / "mcore" / "release"
    ends: dict[str, list[int]] = {}
    for info in CheckpointReader(directory).metadata.storage_data.values():
        ends.setdefault(info.relative_path, []).append(info.offset + info.length)
    # a file of several items (one unit's tensors): the bound is the end of its last item, not of any other
    name = random.choice(sorted(name for name, item_ends in ends.items() if len(item_ends) > 1))
    ends = {name: max(item_ends) for name, item_ends in ends.items()}
    path = directory / name
    assert path.stat().st_size == ends[name]
    with path.open("r+b") as data:
        data.truncate(ends[name] - 1)
    with pytest.raises(ConversionError, match=rf"{re.escape(str(path))} has {ends[name] - 1} bytes, \.metadata stores "
                                              rf"data up to byte {ends[name]}; the file is truncated"):
        CheckpointReader(directory)


def test_the_common_state_of_an_older_release_is_read_from_its_common_pt(converted) -> None:
    """Older megatron-core releases keep the common state (iteration, the run's arguments the export's checks read)
    in ``common.pt`` beside the DCP files: it is what the reader returns, and a file the conversion reads."""
    _, _, tmp = converted
    directory = tmp / "mcore" / "release"
    legacy = {"iteration": random.randrange(1, 10**6), "note": random.random()}
    torch.save(legacy, directory / "common.pt")
    reader = CheckpointReader(directory)
    assert reader.common_state() == legacy
    assert directory / "common.pt" in reader.input_files()


def test_a_converted_checkpoint_records_the_content_metadata_megatron_training_builds(converted) -> None:
    """megatron-core builds the sharded keys it loads from the ``content_metadata`` a checkpoint stores (e.g.
    ``singleton_local_shards`` changes the expert keys): a converted checkpoint must record what megatron training
    itself builds for a torch_dist run (asked of megatron here, not restated), or a resumed run reads other keys."""
    import argparse
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.training.checkpointing import _build_sharded_state_dict_metadata
    _, _, tmp = converted
    run = argparse.Namespace(use_distributed_optimizer=False, ckpt_format="torch_dist")
    expected = _build_sharded_state_dict_metadata(run, dp_cp_group=object())
    del expected["dp_cp_group"]  # a process group, not stored
    assert CheckpointReader(tmp / "mcore" / "release").common_state()["content_metadata"] == expected


@pytest.mark.parametrize("number", [errno.EIO, errno.EROFS, errno.EDQUOT])
def test_an_io_error_or_a_read_only_file_system_behind_a_failed_write_is_the_storages(number: int) -> None:
    """A disk that fails (EIO), a file system mounted read-only (EROFS) or a quota (EDQUOT) met while torch's writer
    runs (it re-raises a plain ``RuntimeError`` while handling the ``OSError``) is the storage's refusal, reported in
    one line; a missing file (ENOENT) is not (the code's or the paths' defect keeps its traceback)."""
    def failed_write(code: int) -> RuntimeError:
        return raised_while_writing(code, f"/scratch/out/__{random.randrange(99)}_0.distcp")

    found = storage_error_behind(failed_write(number))
    assert found is not None and found[0] == number and os.strerror(number) in found[1]
    assert storage_error_behind(failed_write(errno.ENOENT)) is None
