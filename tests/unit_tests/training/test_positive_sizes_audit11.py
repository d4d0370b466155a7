"""``--num-virtual-stages-per-pipeline-rank`` below 1 is refused at start like the other sizes (audit 11): megatron's
``validate_args`` lets a 0 through with a pipeline (it sets a virtual pipeline of no stages), and the run fails
later, when the model chunks are built on every rank."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.startup_checks import check_parsed_args
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, entry_up_to_pretrain, refused_line

FLAG = "--num-virtual-stages-per-pipeline-rank"


def test_virtual_stages_below_one_are_refused_in_one_line_naming_the_flag(monkeypatch, capsys):
    value = random.choice([0, -random.randint(1, 16)])
    argv = [*TINY_MOE_RUN, "--pipeline-model-parallel-size", "2", FLAG, str(value)]
    with pytest.raises(ValueError, match=rf"^{FLAG} {value}: give a size of at least 1$"):
        check_parsed_args(parse_oellm_argv(argv))
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, argv)
    assert line.endswith(f"error: {FLAG} {value}: give a size of at least 1")


def test_virtual_stages_of_one_or_more_pass_the_size_check():
    check_parsed_args(parse_oellm_argv([*TINY_MOE_RUN, "--pipeline-model-parallel-size", "2", FLAG,
                                        str(random.randint(1, 8))]))
