"""megatron-core 0.19.2's null multimodal tokenizer puts its end-of-document token past ``--vocab-size`` (its
vocabulary is the flag plus one), and megatron pads that (``build_tokenizer`` pads ``tokenizer.vocab_size``). A
checkpoint storing only the padded vocabulary of such a run was compared with the flag padded as it is: a resume with
the same ``--vocab-size`` at a multiple of the padding unit was refused as another vocabulary. The tokenizer's own
vocabulary is the reference here."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from megatron.core.tokenizers.vision.libraries.null_multimodal_tokenizer import MegatronNullMultimodalTokenizer

from megatron.oellm.flops import megatron_padded_vocab
from megatron.oellm.training import load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args

CARD = "qwen3-30b-a3b-tiny"


def _checkpoint_of_a_multimodal_run(tmp_path: Path, vocab: int, tp: int, divisor: int) -> Path:
    """A distributed checkpoint whose run arguments store only the padded vocabulary megatron gave a run of the null
    multimodal tokenizer with ``--vocab-size vocab``."""
    padded = megatron_padded_vocab(MegatronNullMultimodalTokenizer(vocab).vocab_size, tp, divisor)
    stored = stored_args(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1, expert_model_parallel_size=1,
                         expert_tensor_parallel_size=1, data_parallel_size=1, vocab_size=None,
                         padded_vocab_size=padded, make_vocab_size_divisible_by=divisor)
    return save_dist_checkpoint(tmp_path / "run", stored, iteration=random.randrange(1, 10**6))


def _parsed(run: Path, vocab: int):
    argv = ["--oellm-model", CARD, "--load", str(run), "--tokenizer-type", "NullMultimodalTokenizer", "--vocab-size",
            str(vocab)]
    return parse_oellm_argv(merge_card_flags(argv).argv)


def test_the_saving_runs_vocab_size_at_a_padding_multiple_resumes(tmp_path: Path) -> None:
    tp, divisor = random.choice([1, 2, 4]), random.choice([64, 128])
    vocab = divisor * tp * random.randrange(100, 2000)  # pads to itself; plus the end-of-document token, one unit more
    run = _checkpoint_of_a_multimodal_run(tmp_path, vocab, tp, divisor)
    args = _parsed(run, vocab)
    load_checks.check_checkpoint_vocabulary(args, read_loaded_checkpoint(args), vocab_given=True)


def test_a_smaller_vocab_size_is_refused_naming_one_that_resumes(tmp_path: Path) -> None:
    tp, divisor = random.choice([1, 2, 4]), random.choice([64, 128])
    vocab = divisor * tp * random.randrange(100, 2000) + random.randrange(0, divisor * tp)
    run = _checkpoint_of_a_multimodal_run(tmp_path, vocab, tp, divisor)
    smaller = _parsed(run, vocab - divisor * tp - random.randrange(0, 50))
    with pytest.raises(ValueError, match=r"such as --vocab-size (\d+)\)") as refusal:
        load_checks.check_checkpoint_vocabulary(smaller, read_loaded_checkpoint(smaller), vocab_given=True)
    named = int(refusal.value.args[0].rsplit("--vocab-size ", 1)[1].rstrip(")"))
    saved = megatron_padded_vocab(MegatronNullMultimodalTokenizer(vocab).vocab_size, tp, divisor)
    assert megatron_padded_vocab(MegatronNullMultimodalTokenizer(named).vocab_size, tp, divisor) == saved
    args = _parsed(run, named)
    load_checks.check_checkpoint_vocabulary(args, read_loaded_checkpoint(args), vocab_given=True)
