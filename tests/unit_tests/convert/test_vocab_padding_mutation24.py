"""A checkpoint without stored run arguments padded at TP 16, 32 or 64 (found by mutation testing: only TP up to 2
was exercised, so the larger sizes could be dropped from the accepted paddings unnoticed). Fresh random vocabulary."""

from __future__ import annotations

import math
import random

import pytest

from megatron.oellm.convert.vocab_padding import VOCAB_TENSORS, stored_padded_vocab


@pytest.mark.parametrize("tp", [16, 32, 64])
def test_padding_of_a_large_tensor_parallel_run_is_padding(tp):
    while True:  # a vocabulary whose padding at this TP no smaller TP gives
        vocab = random.randint(1_000, 300_000)
        padded = math.ceil(vocab / (128 * tp)) * 128 * tp
        if all(padded != math.ceil(vocab / (128 * smaller)) * 128 * smaller for smaller in (1, 2, 4, 8, 16, 32)
               if smaller < tp):
            break
    assert stored_padded_vocab(vocab, dict.fromkeys(VOCAB_TENSORS, padded)) == padded
