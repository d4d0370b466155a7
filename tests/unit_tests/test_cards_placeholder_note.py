"""``oellm flops``, ``oellm plan`` and ``oellm models`` print a ``note:`` line whenever a card shown has placeholder
values (``sources["placeholder"]``, the CKDA hybrid's head shapes), quoting what the card says of them: its numbers
were printed as if final."""

import dataclasses
import json
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import PUBLISHED_CARDS, get_card, placeholder_notes

CKDA = "oellm-ckda-hybrid"
PLACEHOLDER = PUBLISHED_CARDS[CKDA].sources["placeholder"]
NOTE = f"note: {CKDA}: the numbers rest on placeholder shapes ({PLACEHOLDER})"
COMMANDS = {
    "flops": ["flops", CKDA, "--seq-length", "8192"],
    "plan": ["plan", CKDA, "--nodes", "2", "--ep", "8"],
}


def test_only_cards_with_a_placeholder_get_a_note():
    assert [name for name, card in PUBLISHED_CARDS.items() if placeholder_notes([card])] == [CKDA]
    text = f"placeholder {random.random()}"
    marked = dataclasses.replace(get_card("qwen3-30b-a3b"), sources={"placeholder": text})
    assert placeholder_notes([marked, get_card("qwen3.5-35b-a3b")]) == [
        f"note: qwen3-30b-a3b: the numbers rest on placeholder shapes ({text})"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_flops_and_plan_note_the_ckda_placeholders(command, capsys):
    assert cli.main(COMMANDS[command]) == 0
    captured = capsys.readouterr()
    assert NOTE in captured.out.splitlines() and captured.err == ""
    assert cli.main([*COMMANDS[command], "--json"]) == 0  # stdout stays one JSON object, the note goes to stderr
    captured = capsys.readouterr()
    assert json.loads(captured.out)["model"] == CKDA and captured.err.splitlines() == [NOTE]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_card_without_placeholders_has_no_note(command, capsys):
    model = random.choice(["qwen3-30b-a3b", "qwen3.5-35b-a3b"])
    argv = [model if word == CKDA else word for word in COMMANDS[command]]
    assert cli.main(argv) == 0
    assert "note:" not in capsys.readouterr().out


def test_models_notes_the_ckda_card_and_its_flavours(capsys):
    assert cli.main(["models"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {CKDA}, {CKDA}-tiny, {CKDA}-proxy-6L: the numbers rest on placeholder shapes "
                     f"({PLACEHOLDER})"]
    assert cli.main(["models", "--json"]) == 0
    captured = capsys.readouterr()
    assert CKDA in {row["name"] for row in json.loads(captured.out)} and captured.err.splitlines() == notes
