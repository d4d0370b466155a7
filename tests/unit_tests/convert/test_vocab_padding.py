"""Megatron's vocabulary padding on the way back to Hugging Face: extra rows pass as padding only when megatron's
padding of the card's vocabulary explains them (at any TP size), stripping cuts the vocabulary tensors only, back to
their original rows, and a training checkpoint whose vocabulary tensors megatron sized for the run's tokenizer (fewer
rows than the card's vocabulary) is refused naming that cause and the ``--vocab-size`` that exports it."""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert import to_mcore
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS, stored_padded_vocab, strip_vocab_rows
from tests.unit_tests.convert.convert_helpers import assert_bitwise_equal, random_hf_tensors, write_hf


def test_stripping_cuts_the_vocabulary_tensors_only() -> None:
    generator = torch.Generator().manual_seed(3)
    original = {name: torch.randn(300, 8, generator=generator).bfloat16() for name in VOCAB_TENSORS}
    padded = {name: torch.cat([tensor, torch.randn(84, 8, generator=generator).bfloat16()])
              for name, tensor in original.items()}
    padded["decoder.final_layernorm.weight"] = norm = torch.randn(384, generator=generator)
    stripped = strip_vocab_rows(padded, 300)
    assert all(torch.equal(stripped[name], original[name]) for name in VOCAB_TENSORS)
    assert stripped["decoder.final_layernorm.weight"] is norm


def rows(count: int) -> dict[str, int]:
    """Both vocabulary tensors stored with ``count`` rows."""
    return dict.fromkeys(VOCAB_TENSORS, count)


def test_rows_megatrons_padding_explains_are_padding() -> None:
    assert stored_padded_vocab(151936, rows(151936)) == 151936
    assert stored_padded_vocab(151936, rows(152064)) == 152064  # TP 2, no run arguments stored
    assert stored_padded_vocab(300, rows(384)) == 384  # TP 1
    assert stored_padded_vocab(300, {VOCAB_TENSORS[0]: 512}) == 512  # TP 2, tied output layer
    assert stored_padded_vocab(300, {}) == 300
    run = argparse.Namespace(make_vocab_size_divisible_by=128, tensor_model_parallel_size=2, padded_vocab_size=512)
    assert stored_padded_vocab(300, rows(512), run) == 512


def test_rows_megatrons_padding_does_not_explain_are_refused() -> None:
    with pytest.raises(ConversionError, match="different row counts"):
        stored_padded_vocab(300, {VOCAB_TENSORS[0]: 384, VOCAB_TENSORS[1]: 512})
    with pytest.raises(ConversionError, match="fewer than the card's vocabulary of 300"):
        stored_padded_vocab(300, rows(256))
    # a run trained on a 262,144-token vocabulary converted with the 248,320-token Qwen3.5 card
    with pytest.raises(ConversionError, match=r"262144 rows, but megatron pads the card's 248320 tokens to 248320 "
                                              r"or 248832 .* pass the run's --vocab-size to oellm convert"):
        stored_padded_vocab(248320, rows(262144))
    run = argparse.Namespace(make_vocab_size_divisible_by=128, tensor_model_parallel_size=1, padded_vocab_size=512)
    with pytest.raises(ConversionError, match=r"to 384 at TP 1 x make-vocab-size-divisible-by 128"):
        stored_padded_vocab(300, rows(512), run)


@pytest.mark.parametrize("stored", [{"make_vocab_size_divisible_by": 128}, {"tensor_model_parallel_size": 2}])
def test_run_arguments_missing_one_padding_field_fall_back_to_the_plausible_sizes(stored) -> None:
    """A checkpoint whose stored arguments lack the divisor or the TP size is judged as one without arguments:
    300 tokens padded at TP 2 x 128 are 512 rows (no crash on the missing field)."""
    assert stored_padded_vocab(300, rows(512), argparse.Namespace(**stored)) == 512
    with pytest.raises(ConversionError, match="no run arguments stored"):
        stored_padded_vocab(300, rows(500), argparse.Namespace(**stored))


@pytest.mark.parametrize("tp", [16, 32, 64])
def test_padding_of_a_large_tensor_parallel_run_is_padding(tp):
    """A checkpoint without stored run arguments padded at TP 16, 32 or 64 (fresh random vocabulary): fails if the
    larger TP sizes are dropped from the accepted paddings."""
    while True:  # a vocabulary whose padding at this TP no smaller TP gives
        vocab = random.randint(1_000, 300_000)
        padded = math.ceil(vocab / (128 * tp)) * 128 * tp
        if all(padded != math.ceil(vocab / (128 * smaller)) * 128 * smaller for smaller in (1, 2, 4, 8, 16, 32)
               if smaller < tp):
            break
    assert stored_padded_vocab(vocab, dict.fromkeys(VOCAB_TENSORS, padded)) == padded


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
    monkeypatch.setattr(to_mcore, "card_record", lambda card: {})
    monkeypatch.setattr(to_mcore, "megatron_checkpoint_args",
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


def test_the_saving_runs_own_divisor_sets_the_padding() -> None:
    """A run with --make-vocab-size-divisible-by 100 at TP 3 pads 1001 tokens to a multiple of 300: 1200 rows (by
    hand: ceil(1001 / 300) = 4). The default divisor's 1152 (3 x 384) is not that run's padding."""
    run = argparse.Namespace(make_vocab_size_divisible_by=100, tensor_model_parallel_size=3, padded_vocab_size=1200)
    assert stored_padded_vocab(1001, rows(1200), run) == 1200
    with pytest.raises(ConversionError, match=r"1152 rows, but megatron pads the card's 1001 tokens to 1200 at TP 3 "
                                              r"x make-vocab-size-divisible-by 100"):
        stored_padded_vocab(1001, rows(1152), run)
