"""``--vocab-size``'s help is each direction's own: hf-to-mcore's ended in "mcore-to-hf still drops megatron's
padding rows past N", a text shared with mcore-to-hf that says nothing of what hf-to-mcore does."""

from __future__ import annotations

import argparse

import pytest

from megatron.oellm.cli import build_parser


def _vocab_help(direction: str) -> str:
    """The help text of ``oellm convert DIRECTION --vocab-size``."""
    convert = build_parser(["convert"])._subparsers._group_actions[0].choices["convert"]
    parser: argparse.ArgumentParser = convert._subparsers._group_actions[0].choices[direction]
    [action] = [action for action in parser._actions if "--vocab-size" in action.option_strings]
    return action.help


def test_hf_to_mcore_help_speaks_of_its_own_direction() -> None:
    text = _vocab_help("hf-to-mcore")
    assert "mcore-to-hf" not in text and "padding rows" not in text, text
    assert "HF checkpoint" in text and "train from the result with --vocab-size N" in text, text


def test_mcore_to_hf_help_names_the_padding_rows_it_drops_and_its_default() -> None:
    text = _vocab_help("mcore-to-hf")
    assert "drops megatron's padding rows past N" in text and "mcore-to-hf" not in text, text
    assert "default: the card's, or without --model the vocabulary the checkpoint stores" in text, text


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_each_help_is_shown_in_full(direction: str, capsys: pytest.CaptureFixture) -> None:
    """argparse formats the text (a ``%`` in it would fail ``--help``)."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser(["convert"]).parse_args(["convert", direction, "--help"])
    assert exit_info.value.code == 0
    assert " ".join(capsys.readouterr().out.split()).count(" ".join(_vocab_help(direction).split())) == 1
