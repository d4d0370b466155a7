"""``tools/bench_experts.py`` builds the card's expert layers, so its ``--card`` takes only cards whose family has a
spec builder: the CKDA hybrid's card passed and its GPU run stopped on ``KeyError: no spec builder for model family
'ckda_hybrid'``. ``bench_router.py`` reads only the card's sizes and takes every card."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.bench.timing import kernel_tool_parser
from megatron.oellm.cards import get_card, list_card_names
from megatron.oellm.models import SPEC_MODULES


def test_a_card_without_layers_is_a_usage_error(capsys):
    without = [name for name in list_card_names() if get_card(name).family not in SPEC_MODULES]
    assert without, "every card has a spec builder: the CKDA layer landed, drop this test"
    name = random.choice(without)
    with pytest.raises(SystemExit) as stop:
        kernel_tool_parser("Time something.\n\nMore.", with_card=True, builds_layers=True).parse_args(["--card", name])
    assert stop.value.code == 2
    assert f"argument --card: {name}: model family 'ckda_hybrid' has no spec builder yet" in capsys.readouterr().err
    assert kernel_tool_parser("Time the router.", with_card=True).parse_args(["--card", name]).card == name


def test_every_card_with_layers_is_taken():
    parser = kernel_tool_parser("Time something.\n\nMore.", with_card=True, builds_layers=True)
    for name in list_card_names():
        if get_card(name).family in SPEC_MODULES:
            assert parser.parse_args(["--card", name]).card == name
