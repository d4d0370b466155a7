"""Data blend weights megatron-core cannot turn into shares of the samples: NaN, infinite or negative weights, and
weights that add up to 0. megatron-core normalises them only when it builds the datasets (after the model and
optimizer are set up, on every rank); the training entry refuses them at start, naming the flag and the weight."""

from __future__ import annotations

import math
import random
import warnings

import pytest

from megatron.oellm.training import data_sources
from tests.unit_tests.training.entry_helpers import DATA_CHECK_RUN, corpus, data_config_args, entry_up_to_pretrain

BAD_WEIGHTS = {"nan": ["nan", "1"], "infinite": ["inf", "1"], "negative": ["-1", "2"], "zero sum": ["0", "0"]}


@pytest.mark.parametrize("case", list(BAD_WEIGHTS))
def test_megatron_cores_shares_of_such_weights_are_no_proportions(case):
    """What the check guards against, on megatron-core 0.19.2's own normalisation of the weights: every share it
    computes is NaN, or one is negative (a dataset of negative size)."""
    from megatron.core.datasets.utils import normalize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's division by a zero / infinite sum
        shares = normalize([float(weight) for weight in BAD_WEIGHTS[case]])
    assert any(math.isnan(share) or share < 0 for share in shares), shares


@pytest.mark.parametrize("flag", ["--data-path", "--train-data-path", "--valid-data-path"])
@pytest.mark.parametrize("case", list(BAD_WEIGHTS))
def test_bad_weights_are_refused_naming_the_flag_and_the_weight(case, flag, tmp_path):
    first, second = corpus(tmp_path, "first"), corpus(tmp_path, "second")
    weights = BAD_WEIGHTS[case]
    train = ["--train-data-path", first] if flag == "--valid-data-path" else []  # a split's own flag is named
    args = data_config_args([*train, flag, weights[0], first, weights[1], second])
    if case == "zero sum":
        message = f"{flag}: the weights of datasets {first!r}, {second!r} add up to 0"
    else:
        message = f"{flag}: the weight {float(weights[0]):g} of dataset {first!r} is not a finite number >= 0"
    with pytest.raises(ValueError) as refusal:
        data_sources.check_data_source(args)
    assert str(refusal.value).startswith(message), refusal.value


def test_the_entry_refuses_a_nan_weight_in_one_line(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    big = corpus(tmp_path, "big")
    assert entry.main([*DATA_CHECK_RUN, "--data-path", "nan", big, "--split", "100,0,0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"megatron.oellm.training.entry: error: --data-path: the weight nan of dataset {big!r} is not a "
                   "finite number >= 0; a blend is weight-prefix pairs, each weight its share of the samples"]


def test_positive_weights_and_a_muted_dataset_pass(tmp_path):
    """Weights of any positive size pass, and so does a weight of 0 beside a positive one (a dataset left out of
    the blend without editing the list)."""
    first, second = corpus(tmp_path, "first"), corpus(tmp_path, "second")
    for weights in ([random.uniform(0.01, 100), random.uniform(0.01, 100)], [0, random.uniform(0.01, 100)]):
        args = data_config_args(["--data-path", str(weights[0]), first, str(weights[1]), second, "--split", "100,0,0"])
        data_sources.check_blend_weights(args, (([first, second]), [float(w) for w in weights]), None)
