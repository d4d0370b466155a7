"""``mcore-to-hf --model CARD`` of a checkpoint that stores another card was refused naming the differences alone
(``checkpoint was written for card 'qwen3-30b-a3b-tiny', not qwen3-30b-a3b: num_layers: checkpoint 2, card 48; ...``);
it now names the fix, omitting ``--model`` or passing the stored card, and both convert."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import CARD_KEY, card_record
from megatron.oellm.convert.stored_checks import check_stored_card

OTHERS = ["qwen3-30b-a3b", "qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-proxy-4L", "qwen3.5-35b-a3b"]
"""Cards that differ structurally from the fixture's qwen3-30b-a3b-tiny (depth, width or family)."""


def _mcore_to_hf(tmp: Path, out: str, model: list[str]) -> int:
    """Exit status of ``oellm convert mcore-to-hf [--model CARD] --mcore tmp/mcore --out tmp/out``."""
    return main(["convert", "mcore-to-hf", *model, "--mcore", str(tmp / "mcore"), "--out", str(tmp / out)])


def test_another_card_is_refused_naming_both_fixes_which_convert(converted, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    other = random.choice(OTHERS)
    capsys.readouterr()
    assert _mcore_to_hf(tmp, "refused", ["--model", other]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"oellm convert mcore-to-hf: error: checkpoint was written for card {card.name!r}, not "
                           f"{other}: "), line
    assert line.endswith(f"; omit --model (the checkpoint's card is used) or pass --model {card.name}"), line
    assert not (tmp / "refused").exists()
    assert _mcore_to_hf(tmp, "without_model", []) == 0
    assert _mcore_to_hf(tmp, "stored_model", ["--model", card.name]) == 0


def test_a_stored_card_not_registered_is_not_offered(converted) -> None:
    """A stored name no card has (renamed since, or a custom one) would be refused as ``--model``."""
    card, _, _ = converted
    stored = card_record(card.with_layers(card.num_layers + 1, name=f"custom-{random.randrange(10**6)}"))
    with pytest.raises(ConversionError) as refusal:
        check_stored_card(get_card(card.name), {CARD_KEY: stored})
    message = str(refusal.value)
    assert message.endswith("; pass --model with the card the checkpoint was written for (see `oellm models`)"), message
    assert "omit --model" not in message
