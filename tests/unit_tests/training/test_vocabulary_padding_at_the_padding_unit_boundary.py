"""The vocabulary check of a checkpoint storing only the padded vocabulary pads the run's ``--vocab-size`` as megatron
pads the tokenizer's own vocabulary: the null tokenizer's is the flag, the null multimodal tokenizer's the flag plus
its end-of-document token. At the padding unit's boundary (a multiple of it, or one below) one row more or less is
another padded size, so the saving run's ``--vocab-size`` must resume there for each tokenizer; and the refusal of a
larger run vocabulary that also loads the optimizer state names a ``--vocab-size`` that resumes, and the refusal of
a smaller one the run's own ``--vocab-size``."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
from megatron.core.tokenizers.vision.libraries.null_multimodal_tokenizer import MegatronNullMultimodalTokenizer

from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args

CARD = "qwen3-30b-a3b-tiny"
TOKENIZERS = {"NullTokenizer": NullTokenizer, "NullMultimodalTokenizer": MegatronNullMultimodalTokenizer}
"""``--tokenizer-type`` -> megatron-core 0.19.2's class, whose ``vocab_size`` megatron pads."""


def _saved(tmp_path: Path, tokenizer: str, vocab: int, tp: int, divisor: int) -> Path:
    """A checkpoint whose run arguments store only the vocabulary megatron padded for ``tokenizer`` built with
    ``--vocab-size vocab``."""
    padded = megatron_padded_vocab(TOKENIZERS[tokenizer](vocab).vocab_size, tp, divisor)
    stored = stored_args(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1, expert_model_parallel_size=1,
                         expert_tensor_parallel_size=1, data_parallel_size=1, vocab_size=None,
                         padded_vocab_size=padded, make_vocab_size_divisible_by=divisor, tokenizer_type=tokenizer)
    return save_dist_checkpoint(tmp_path / "run", stored, iteration=random.randrange(1, 10**6))


def _check(run: Path, tokenizer: str, vocab: int) -> None:
    """The vocabulary check of resuming ``run`` (its optimizer state too) with ``--vocab-size vocab``."""
    args = parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--load", str(run), "--tokenizer-type", tokenizer,
                                              "--vocab-size", str(vocab)]).argv)
    load_checks.check_checkpoint_vocabulary(args, read_loaded_checkpoint(args), vocab_given=True)


def _unit() -> tuple[int, int, int]:
    """(TP size, --make-vocab-size-divisible-by, the padding unit: their product), fresh."""
    tp, divisor = random.choice([1, 2, 4]), random.choice([64, 128])
    return tp, divisor, tp * divisor


@pytest.mark.parametrize("below", [0, 1], ids=["at_a_multiple", "one_below"])
@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_the_saving_runs_vocab_size_resumes_at_the_boundary(tmp_path: Path, tokenizer: str, below: int) -> None:
    tp, divisor, unit = _unit()
    vocab = unit * random.randrange(100, 2000) - below
    _check(_saved(tmp_path, tokenizer, vocab, tp, divisor), tokenizer, vocab)


def test_a_larger_multimodal_vocabulary_resuming_its_optimizer_is_refused_naming_one_that_resumes(
        tmp_path: Path) -> None:
    tp, divisor, unit = _unit()
    vocab = unit * random.randrange(100, 2000) - random.randrange(0, unit)
    run = _saved(tmp_path, "NullMultimodalTokenizer", vocab, tp, divisor)
    with pytest.raises(ValueError, match=r"pass --vocab-size (\d+) to resume it") as refusal:
        _check(run, "NullMultimodalTokenizer", vocab + unit + random.randrange(0, 50))
    named = int(re.search(r"pass --vocab-size (\d+) to resume it", str(refusal.value))[1])
    _check(run, "NullMultimodalTokenizer", named)


def test_a_smaller_multimodal_vocabulary_is_refused_naming_the_runs_own(tmp_path: Path) -> None:
    tp, divisor, unit = _unit()
    vocab = unit * random.randrange(100, 2000) - random.randrange(0, unit)
    smaller = vocab - unit - random.randrange(0, 50)
    with pytest.raises(ValueError, match=f"while the run's --vocab-size {smaller} \\(the card's when not given\\)"):
        _check(_saved(tmp_path, "NullMultimodalTokenizer", vocab, tp, divisor), "NullMultimodalTokenizer", smaller)
