"""``megatron_args.flag_destination`` names a flag's parser destination without building megatron's parser, which
took ``oellm convert mcore-to-hf`` (through ``convert.stored_checks``) about six seconds on every export; its answer
for every flag the cards emit equals the parser's, so the spelt rule and its table cannot drift from megatron."""

from __future__ import annotations

import pytest

from megatron.oellm import megatron_args
from megatron.oellm.cards import get_card, list_card_names
from megatron.oellm.megatron_args import flag_destination, model_flags
from megatron.oellm.training import args as training_args
from megatron.oellm.training.args import TRAINING_DEFAULTS, oellm_parser


def _card_flags() -> set[str]:
    """Every flag (with ``--``) that a published card's flags or the entry's training defaults set."""
    names = set(TRAINING_DEFAULTS)
    for card in list_card_names():
        names |= set(model_flags(get_card(card)))
    return {f"--{name}" for name in names}


def test_every_card_flag_has_the_parsers_destination() -> None:
    """The cheap answer equals the destination megatron's own parser stores each card flag under."""
    actions = oellm_parser()._option_string_actions
    flags = _card_flags()
    assert flags
    for flag in flags:
        assert flag_destination(flag) == actions[flag].dest, flag


def test_no_parser_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Naming a destination builds no parser: the convert command pays nothing for it."""
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("flag_destination built megatron's parser")

    training_args.oellm_parser.cache_clear()
    monkeypatch.setattr(training_args, "megatron_parser", refuse)
    monkeypatch.setattr(megatron_args, "megatron_parser", refuse)
    try:
        assert flag_destination("--norm-epsilon") == "layernorm_epsilon"
        assert flag_destination("--moe-router-topk") == "moe_router_topk"
    finally:
        training_args.oellm_parser.cache_clear()
