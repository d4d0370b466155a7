"""``int_at_least``: the argparse type of every count option of ``oellm`` and of the kernel tools."""

import argparse
import random

import pytest

from megatron.oellm.commands import int_at_least


@pytest.mark.parametrize(("minimum", "wanted"), [(0, "a non-negative integer"), (1, "a positive integer"),
                                                 (2, "an integer >= 2")])
def test_values_below_the_minimum_or_not_integers_are_refused_naming_the_minimum(minimum: int, wanted: str) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int_at_least(minimum, " (why)"))
    value = random.randint(minimum, 10**6)
    assert parser.parse_args(["--count", str(minimum)]).count == minimum
    assert parser.parse_args(["--count", str(value)]).count == value
    for bad in (str(minimum - 1), str(minimum - random.randint(2, 10**6)), "1e3", "many", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"^expected {wanted} \(why\), got {bad!r}$"):
            int_at_least(minimum, " (why)")(bad)
