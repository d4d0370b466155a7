"""A bad weight in one split of ``--per-split-data-args-path`` is refused naming the file and the split it is in
(audit 11): the file holds three blends, and the user has to know which one to fix."""

from __future__ import annotations

import json
import random

import pytest

from megatron.oellm.training import data_sources
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import corpus


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_a_bad_weight_in_a_per_split_file_names_the_split(split, tmp_path):
    first, second = corpus(tmp_path, f"first{random.randrange(10**6)}"), corpus(tmp_path, "second")
    bad = random.choice(["nan", "-1"])
    blends = {name: [first] for name in ("train", "valid", "test")}
    blends[split] = [bad, first, str(random.uniform(0.5, 5)), second]
    split_file = tmp_path / f"splits{random.randrange(10**6)}.json"
    split_file.write_text(json.dumps(blends))
    args = parse_oellm_argv(["--seq-length", "16", "--per-split-data-args-path", str(split_file)])
    args.data_parallel_size = 1
    with pytest.raises(ValueError) as refusal:
        data_sources.check_data_source(args)
    assert str(refusal.value).startswith(f"--per-split-data-args-path {split_file} ({split}): the weight "
                                         f"{float(bad):g} of dataset {first!r} is not a finite number >= 0"), \
        refusal.value
