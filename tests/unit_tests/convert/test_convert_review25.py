"""Review 25 of the conversion: a ``config.json`` that leaves out a setting no tensor shape shows (Qwen3-MoE's
``norm_topk_prob``, whose transformers default differs from the card) is compared as transformers reads it, and an HF
model whose only difference from the card is its vocabulary is pointed to ``--vocab-size``, not to another card."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from convert_helpers import assert_bitwise_equal, random_hf_tensors, write_hf

from megatron.oellm.cards import get_card
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.pipeline import hf_to_mcore_checkpoint, mcore_to_hf_checkpoint
from megatron.oellm.convert.safetensors_io import SafetensorsSource

QWEN3 = "qwen3-30b-a3b-tiny"


def test_a_config_leaving_out_norm_topk_prob_is_read_as_transformers_reads_it(tmp_path: Path) -> None:
    """Without ``norm_topk_prob`` transformers' Qwen3-MoE does not renormalise the top-k weights (class default
    False) while the card does: the HF model and the card compute different routings, so the config is refused."""
    card = get_card(QWEN3)
    assert not card.moe_router_pre_softmax  # the card renormalises over the chosen experts
    write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / "hf")
    config = tmp_path / "hf" / "config.json"
    data = json.loads(config.read_text())
    assert data.pop("norm_topk_prob") is True
    config.write_text(json.dumps(data))
    with pytest.raises(ConversionError, match=r"norm_topk_prob: checkpoint False, card True"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "tensor-shapes"])
def test_an_hf_model_of_another_vocabulary_is_pointed_to_vocab_size(tmp_path: Path, with_config: bool) -> None:
    """An HF model with an extended vocabulary fits no other card; the refusal names the ``--vocab-size`` that
    converts it (from its config, else from the embedding rows), and that vocabulary converts bit for bit."""
    card = get_card(QWEN3)
    vocab = card.vocab_size + random.randrange(1, 1000)
    hf = random_hf_tensors(card.with_vocab(vocab), seed=random.randrange(2**31))
    write_hf(card.with_vocab(vocab), hf, tmp_path / "hf")
    if not with_config:
        (tmp_path / "hf" / "config.json").unlink()
    with pytest.raises(ConversionError) as raised:
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert f"pass --vocab-size {vocab} " in str(raised.value)
    assert "--model" not in str(raised.value)
    hf_to_mcore_checkpoint(card.with_vocab(vocab), tmp_path / "hf", tmp_path / "mcore")
    mcore_to_hf_checkpoint(card.with_vocab(vocab), tmp_path / "mcore", tmp_path / "back")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "back")))


def test_a_config_of_another_shape_still_points_to_the_card() -> None:
    """Other contradictions (here with the vocabulary) still ask for the right card."""
    from megatron.oellm.convert.family import family_module
    from megatron.oellm.convert.hf_config import check_hf_config

    card = get_card(QWEN3)
    config = family_module(card).hf_config_from_card(card.with_vocab(card.vocab_size + 64)).to_dict()
    config["num_experts_per_tok"] = card.moe_router_topk + 1
    with pytest.raises(ConversionError, match=r"pick the card of this checkpoint with --model$"):
        check_hf_config(card, json.dumps(config), "config.json")


def test_checkpoint_data_the_metadata_does_not_cover_is_refused(converted) -> None:
    """A ``.metadata`` whose chunks leave part of a tensor out (here a random layer's slice of a layer-stacked
    Qwen3-MoE tensor) gave no data for it: the export used to write the read buffer's uninitialised memory there and
    exit 0; it is refused before anything is written."""
    import pickle

    card, _, tmp = converted
    layer = random.randrange(card.num_layers)
    key = "decoder.layers.pre_mlp_layernorm.weight"
    path = tmp / "mcore" / "release" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    stored = metadata.state_dict_metadata[key]
    stored.chunks = [chunk for chunk in stored.chunks if chunk.offsets[0] != layer]
    metadata.storage_data = {index: info for index, info in metadata.storage_data.items()
                             if not (index.fqn == key and index.offset[0] == layer)}
    path.write_bytes(pickle.dumps(metadata))
    with pytest.raises(ConversionError, match=rf"no data for {card.hidden_size} of the {card.hidden_size} elements "
                                              rf"of decoder\.layers\.{layer}\.pre_mlp_layernorm\.weight"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    assert not (tmp / "out").exists()
