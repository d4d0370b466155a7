"""A weight megatron-core reads as a dataset prefix: a data path list of an odd word count (``0.5 data/c1 0.5``), or
with a weight after its prefix, is a list of prefixes without weights to megatron-core's ``get_blend_from_list``, so
the entry's refusal named ``'0.5'`` as a missing dataset without saying why. It now adds that weighted data paths
are ``WEIGHT PREFIX`` pairs."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.training import data_sources
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import corpus, entry_up_to_pretrain, refused_line

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16"]
"""The entry's command line here, before its data flags."""

HINT = "a weighted data path list is WEIGHT PREFIX pairs"
"""The part of the refusal that says how weights are written."""


def _weight() -> str:
    return str(round(random.uniform(0.05, 0.95), 3))


def test_megatron_core_reads_an_odd_list_as_prefixes_weights_included():
    from megatron.core.datasets.utils import get_blend_from_list

    weights = [_weight(), _weight()]
    assert get_blend_from_list([weights[0], "data/c1", weights[1]]) == ([weights[0], "data/c1", weights[1]], None)


@pytest.mark.parametrize("words", [
    lambda data, weights: [weights[0], data[0], weights[1]],
    lambda data, weights: [weights[0], data[0], weights[1], data[1], weights[2]],
    lambda data, weights: [data[0], weights[0]],
])
def test_a_weight_read_as_a_prefix_is_named_with_the_pair_form(words, monkeypatch, capsys, tmp_path):
    data, weights = [corpus(tmp_path, f"c{number}") for number in range(2)], [_weight() for _ in range(3)]
    given = words(data, weights)
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*ARGV, "--data-path", *given, "--split", "100,0,0"])
    numbers = list(dict.fromkeys(word for word in given if word not in data))
    assert f"no indexed dataset (PREFIX.bin and PREFIX.idx) at {', '.join(map(repr, numbers))}:" in line, line
    assert HINT in line, line


def test_a_per_split_path_gets_the_hint_too(tmp_path):
    weight = _weight()
    args = parse_oellm_argv(["--train-data-path", corpus(tmp_path, "c"), weight])
    with pytest.raises(ValueError, match=rf"at '{weight}':.*{HINT}"):
        data_sources.check_data_source(args)


def test_a_missing_prefix_that_is_no_number_gets_no_hint(monkeypatch, capsys, tmp_path):
    missing = str(tmp_path / f"absent{random.randrange(10**6)}")
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*ARGV, "--data-path", _weight(), corpus(tmp_path, "c"), _weight(), missing,
                                        "--split", "100,0,0"])
    assert f"at {missing!r}:" in line and HINT not in line, line
