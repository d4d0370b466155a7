"""Review 24 of the conversion internals: a checkpoint that holds an expert's weights in both layouts (fused and per
expert) is refused instead of converting one and dropping the other, and a training checkpoint whose vocabulary
tensors megatron sized for the run's tokenizer (fewer rows than the card's vocabulary) is refused naming that cause
and the ``--vocab-size`` that exports it, not as a checkpoint of another card."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from convert_helpers import assert_bitwise_equal, fuse_experts, random_hf_tensors, write_hf

from megatron.oellm.cards import get_card
from megatron.oellm.convert import pipeline
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.pipeline import hf_to_mcore_checkpoint, mcore_to_hf_checkpoint
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS, stored_padded_vocab


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny"])
def test_experts_in_both_layouts_are_refused(tmp_path: Path, name: str) -> None:
    """Fused ``experts.gate_up_proj`` / ``down_proj`` next to the per-expert tensors of the same layer (two files
    without an index, e.g. a fused dump beside an older save): the converter would read the fused ones and drop the
    per-expert ones without a word; which of the two the user meant is unknown, so it is refused, naming both."""
    card = get_card(name)
    hf = random_hf_tensors(card, seed=24)
    per_expert_changed = {n: (t + 1 if ".mlp.experts." in n else t) for n, t in hf.items()}
    write_hf(card, {**per_expert_changed, **fuse_experts(card, hf)}, tmp_path / "hf")
    with pytest.raises(ConversionError, match=r"'model\.layers\.0\.mlp\.experts\.(gate_up_proj|down_proj)' and "
                                              r"'model\.layers\.0\.mlp\.experts\.0\.(gate|up|down)_proj\.weight' "
                                              r"both hold"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    assert not (tmp_path / "mcore").exists()


def test_each_expert_layout_alone_still_converts(tmp_path: Path) -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=25)
    write_hf(card, fuse_experts(card, hf), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


def _training_args(padded: int, tp: int = 1) -> argparse.Namespace:
    """The vocabulary fields of the ``args`` megatron training stores, for a run whose Hugging Face tokenizer
    megatron padded to ``padded`` (megatron pads ``len(tokenizer)``, not ``--vocab-size``)."""
    return argparse.Namespace(make_vocab_size_divisible_by=128, tensor_model_parallel_size=tp,
                              padded_vocab_size=padded, tokenizer_type="HuggingFaceTokenizer")


def test_rows_padded_from_the_runs_tokenizer_name_that_cause() -> None:
    """Qwen3's tokenizer has 151,669 tokens, its card 151,936: a run at TP 1 builds (and saves) 151,680 rows."""
    rows = dict.fromkeys(VOCAB_TENSORS, 151680)
    with pytest.raises(ConversionError) as raised:
        stored_padded_vocab(151936, rows, _training_args(151680))
    message = str(raised.value)
    assert "tokenizer" in message and "--vocab-size" in message and "151680" in message
    assert "right card" not in message
    # without the run's own padded size stored, fewer rows still point at the card
    with pytest.raises(ConversionError, match="is --model the right card"):
        stored_padded_vocab(151936, rows)


def test_a_run_with_a_shorter_tokenizer_exports_with_the_advised_vocabulary(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint as training saves it (run arguments with the tokenizer's padded vocabulary, no card or HF config
    of ours) for the 512-token tiny card, from a 300-token tokenizer padded to 384 rows: refused under the card,
    exported under the advised ``--vocab-size`` bit for bit."""
    card = get_card("qwen3-30b-a3b-tiny")
    run_card = card.with_vocab(384)
    hf = random_hf_tensors(run_card, seed=26)
    write_hf(run_card, hf, tmp_path / "hf")
    (tmp_path / "hf" / "config.json").unlink()
    monkeypatch.setattr(pipeline, "card_record", lambda card: {})
    monkeypatch.setattr(pipeline, "megatron_checkpoint_args",
                        lambda card: argparse.Namespace(num_layers=card.num_layers, **vars(_training_args(384))))
    hf_to_mcore_checkpoint(run_card, tmp_path / "hf", tmp_path / "mcore")
    with pytest.raises(ConversionError) as raised:
        mcore_to_hf_checkpoint(card, tmp_path / "mcore", tmp_path / "refused")
    assert "--vocab-size" in str(raised.value) and "right card" not in str(raised.value)
    assert not (tmp_path / "refused").exists()
    mcore_to_hf_checkpoint(card.with_vocab(384), tmp_path / "mcore", tmp_path / "out")
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))
    # the tokenizer's own length works too: megatron's padding of 300 tokens explains the 84 extra rows
    summary = mcore_to_hf_checkpoint(card.with_vocab(300), tmp_path / "mcore", tmp_path / "out300")
    exported = dict(SafetensorsSource(tmp_path / "out300"))
    assert summary.padding_rows == 84
    assert torch.equal(exported["model.embed_tokens.weight"], hf["model.embed_tokens.weight"][:300])
