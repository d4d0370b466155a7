"""megatron-core 0.19.2 reads every dataset under ``--per-dataset-sequences-path`` as the token type its
``GPTDatasetConfig`` derives from the tokenizer's vocabulary alone, and the entry refuses a corpus of another type by
:func:`~megatron.oellm.training.data_sources.megatron_token_type`. At the uint16 boundary (a vocabulary of exactly
65,536 tokens) a rule off by one refused a uint16 corpus megatron reads right and let an int32 one through, which
megatron then trained on as other tokens."""

from __future__ import annotations

import random
import types

import numpy
import pytest
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import DType

from megatron.oellm.training.data_sources import megatron_token_type

UINT16_TOKENS = numpy.iinfo(numpy.uint16).max + 1
"""The most token ids a uint16 corpus holds (65,536)."""


def megatron_reads(vocabulary: int) -> type:
    """The token type megatron-core's own ``GPTDatasetConfig`` reads the datasets as for ``vocabulary`` tokens."""
    config = GPTDatasetConfig(random_seed=1, sequence_length=8, blend=None, blend_per_split=[None] * 3, split=None,
                              tokenizer=types.SimpleNamespace(vocab_size=vocabulary), reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False)
    return DType.dtype_from_code(config.token_dtype_code)


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_the_token_type_at_the_uint16_boundary_is_megatrons(offset: int) -> None:
    """65,535, 65,536 (the last vocabulary megatron reads as uint16) and 65,537 tokens."""
    vocabulary = UINT16_TOKENS + offset
    assert megatron_token_type(vocabulary) is megatron_reads(vocabulary), vocabulary


def test_the_token_type_of_any_vocabulary_is_megatrons() -> None:
    """Fresh vocabularies on either side of the boundary, near it and far from it."""
    vocabularies = [random.randint(1, UINT16_TOKENS), random.randint(UINT16_TOKENS + 1, 2**20),
                    UINT16_TOKENS + random.randint(-64, 64)]
    for vocabulary in vocabularies:
        assert megatron_token_type(vocabulary) is megatron_reads(vocabulary), vocabulary
