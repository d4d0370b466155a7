"""A checkpoint of a larger vocabulary than the run's ``--vocab-size`` is refused for each tokenizer whose vocabulary
megatron takes from that flag. megatron-core 0.19.2's ``build_tokenizer``
(``megatron/core/tokenizers/utils/build_tokenizer.py``) passes ``args.vocab_size`` as the ``vocab_size`` keyword to
the tiktoken library for ``TikTokenizer`` and to the null-text / null-multimodal libraries for ``NullTokenizer`` and
``NullMultimodalTokenizer`` (``text/libraries/null_tokenizer.py``, ``vision/libraries/null_multimodal_tokenizer.py``);
every other tokenizer gives its own vocabulary."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args

CARD = "qwen3-30b-a3b-tiny"
ONE_GPU = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
           "expert_tensor_parallel_size": 1, "data_parallel_size": 1}


@pytest.mark.parametrize("tokenizer", ["NullTokenizer", "NullMultimodalTokenizer", "TikTokenizer"])
def test_a_checkpoint_of_a_larger_vocabulary_is_refused(tmp_path: Path, tokenizer: str) -> None:
    """A resume of a checkpoint whose run trained a larger ``--vocab-size`` than this run's, under a tokenizer that
    reads the flag: refused naming the checkpoint, both vocabularies and ``--vocab-size``; the saved vocabulary
    passes."""
    vocab = get_card(CARD).vocab_size + random.randrange(1, 400)
    stored = stored_args(**ONE_GPU, vocab_size=vocab, padded_vocab_size=megatron_padded_vocab(vocab),
                         make_vocab_size_divisible_by=128)
    run = save_dist_checkpoint(tmp_path / "run", stored, iteration=random.randrange(1, 10**6))
    smaller = vocab - random.randrange(1, 300)

    def parsed(size: int):
        argv = ["--oellm-model", CARD, "--load", str(run), "--tokenizer-type", tokenizer, "--vocab-size", str(size)]
        return parse_oellm_argv(merge_card_flags(argv).argv)

    args = parsed(smaller)
    with pytest.raises(ValueError, match=rf"--load {run} holds a checkpoint of a {vocab}-token vocabulary, while the "
                                         rf"run's is {smaller} .*pass --vocab-size {vocab},"):
        load_checks.check_checkpoint_vocabulary(args, read_loaded_checkpoint(args), vocab_given=True)
    same = parsed(vocab)
    load_checks.check_checkpoint_vocabulary(same, read_loaded_checkpoint(same), vocab_given=True)
