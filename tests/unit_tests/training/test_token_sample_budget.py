"""The documented budget of the start-up token-id check (``check_dataset_indices``' docstring, the CHANGELOG): the
full 1 MiB per end up to 32 datasets, less from 33, about 6.5 KiB per end at 5,000, never more than 64 MiB in all
(mutation audit of ``token_sample_bytes``)."""

from __future__ import annotations

import random

from megatron.oellm.training.data_sources import TOKEN_SAMPLE_BUDGET_BYTES, TOKEN_SAMPLE_BYTES, token_sample_bytes

MIB = 1 << 20


def test_the_constants_are_the_documented_ones():
    assert TOKEN_SAMPLE_BYTES == MIB and TOKEN_SAMPLE_BUDGET_BYTES == 64 * MIB


def test_up_to_32_datasets_keep_the_full_sample():
    assert token_sample_bytes(32) == MIB
    assert token_sample_bytes(random.randint(1, 32)) == MIB
    assert token_sample_bytes(33) < MIB


def test_5000_datasets_read_about_6_5_kib_per_end():
    share = token_sample_bytes(5000)
    assert share == 64 * MIB // (2 * 5000)
    assert round(share / 1024, 1) in (6.5, 6.6)


def test_every_count_stays_within_the_budget():
    for datasets in (33, random.randint(34, 10**6), random.randint(10**6, 4 * 10**6)):
        share = token_sample_bytes(datasets)
        assert 0 < share <= MIB and 2 * datasets * share <= TOKEN_SAMPLE_BUDGET_BYTES, datasets
