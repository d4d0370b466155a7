"""A command line without ``--seq-length`` is refused before megatron's ``validate_args`` (a bare ``assert
args.encoder_seq_length is not None`` there), naming the length the card plans with; the length is not filled in."""

from __future__ import annotations

import pytest

from megatron.oellm.cards import get_card
from tests.unit_tests.training.before_validation import ValidationReached, entry_refusing_before_validation
from tests.unit_tests.training.entry_helpers import one_error_line, tiny_moe_run


def _without_seq_length(run: list[str]) -> list[str]:
    """``run`` less its ``--seq-length N``."""
    at = run.index("--seq-length")
    return [*run[:at], *run[at + 2:]]


@pytest.mark.parametrize("card", ["qwen3-30b-a3b-tiny", "qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b"])
def test_the_entry_asks_for_seq_length_naming_the_cards(monkeypatch, capsys, card: str) -> None:
    entry = entry_refusing_before_validation(monkeypatch)
    assert entry.main(_without_seq_length(tiny_moe_run(card))) == 2
    line = one_error_line(capsys)
    assert f"give --seq-length (model card {card} plans with {get_card(card).seq_length})" in line


def test_the_encoder_seq_length_stands_in(monkeypatch) -> None:
    """megatron takes ``--encoder-seq-length`` for the sequence length: no refusal then (validation is reached)."""
    entry = entry_refusing_before_validation(monkeypatch)
    run = _without_seq_length(tiny_moe_run())
    with pytest.raises(ValidationReached, match="validation was reached"):
        entry.main([*run, "--encoder-seq-length", "64"])
