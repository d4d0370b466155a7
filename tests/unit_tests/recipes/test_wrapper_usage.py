"""Each recipe wrapper's usage comment names every option ``oellm recipe`` takes besides the config: the wrappers
left out ``--time``, ``--save-interval`` and ``--train-iters``, which examples/oellm/README.md documents."""

from __future__ import annotations

import argparse
import re

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.commands.recipe import add_arguments

WRAPPERS = sorted(path for path in EXAMPLES.glob("*.sh") if path.name != "main.sh")


def recipe_options() -> set[str]:
    """The long options of ``oellm recipe``, ``--help`` aside."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--") and option != "--help"}


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda path: path.stem)
def test_the_usage_comment_names_every_option(wrapper) -> None:
    usage = "\n".join(line for line in wrapper.read_text().splitlines() if line.startswith("#"))
    named = set(re.findall(r"--[a-z][a-z-]*", usage))
    assert recipe_options() <= named, sorted(recipe_options() - named)
    assert f"bash examples/oellm/{wrapper.name} " in usage
