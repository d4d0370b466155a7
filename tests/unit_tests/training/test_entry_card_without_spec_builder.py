"""A card of a family without a spec builder is refused by the entry in one line saying so.

``--oellm-model oellm-ckda-hybrid-tiny`` (listed by ``oellm models``) reached megatron's ``validate_args``, which
refused it with megatron-core's raw "In main pattern, 'K' is not a valid layer symbol"; ``oellm recipe`` already
said that the family's spec builder does not exist yet, and the entry now says the same, before that validation.
"""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cards import get_card, list_card_names
from megatron.oellm.models import SPEC_MODULES
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    entry_on_a_cpu_node,
    entry_up_to_pretrain,
    refused_line,
)

WITHOUT_SPEC_BUILDER = sorted(name for name in list_card_names() if get_card(name).family not in SPEC_MODULES)
"""The registered cards whose family has no spec builder (the CKDA hybrids)."""


@pytest.mark.parametrize("node", ["gpu_node", "login_node"])
def test_a_card_without_spec_builder_is_refused_before_validation(monkeypatch: pytest.MonkeyPatch, capsys,
                                                                  node: str) -> None:
    assert WITHOUT_SPEC_BUILDER, "every card's family has a spec builder now: drop this test"
    card = random.choice(WITHOUT_SPEC_BUILDER)
    entry = entry_up_to_pretrain(monkeypatch) if node == "gpu_node" else entry_on_a_cpu_node(monkeypatch)
    run = list(TINY_MOE_RUN)
    run[run.index("--oellm-model") + 1] = card
    line = refused_line(entry, capsys, run)
    family = get_card(card).family
    assert (f"error: --oellm-model {card}: the spec builder of model family {family!r} "
            f"(megatron/oellm/models/{family}) does not exist yet") in line, line
    assert "is not a valid layer symbol" not in line
