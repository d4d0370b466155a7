"""A data path list megatron-core's ``get_blend_from_list`` cannot read (a number where a weight's prefix goes) is a
one-line refusal of the training entry naming the flag and the list's form, not a bare ``AssertionError``."""

import random

import pytest

from megatron.oellm.training import data
from megatron.oellm.training.args import parse_oellm_argv


def _dataset(tmp_path, name: str) -> str:
    """An indexed dataset's prefix whose ``.bin`` and ``.idx`` exist (empty: only their presence is checked)."""
    for suffix in (".bin", ".idx"):
        (tmp_path / f"{name}{suffix}").touch()
    return str(tmp_path / name)


def _mixed_list(tmp_path) -> list[str]:
    """Prefix first, then weights out of place: the first pair's weight is not a number, a later one's is."""
    weight = str(round(random.uniform(0.05, 0.95), 3))
    return [_dataset(tmp_path, "a"), weight, weight, _dataset(tmp_path, "b")]


@pytest.mark.parametrize("flags, named", [
    (lambda paths: ["--data-path", *paths], "--data-path"),
    (lambda paths: ["--train-data-path", *paths, "--valid-data-path", paths[0], "--test-data-path", paths[0]],
     "--train/valid/test-data-path"),
])
def test_a_list_mixing_weights_into_prefix_places_is_refused_with_its_form(tmp_path, flags, named):
    """megatron-core asserts without a message (on every rank, before any other check); the refusal names the flag."""
    args = parse_oellm_argv(flags(_mixed_list(tmp_path)))
    with pytest.raises(ValueError, match=rf"^{named}: give dataset prefixes \(PREFIX PREFIX \.\.\.\) or weight-prefix"):
        data.check_data_source(args)


def test_weight_prefix_pairs_and_plain_prefixes_still_pass(tmp_path):
    """The two forms megatron-core reads pass the check."""
    a, b = _dataset(tmp_path, "a"), _dataset(tmp_path, "b")
    weights = [str(round(random.uniform(0.05, 0.95), 3)) for _ in range(2)]
    data.check_data_source(parse_oellm_argv(["--data-path", weights[0], a, weights[1], b]))
    data.check_data_source(parse_oellm_argv(["--data-path", a, b]))
