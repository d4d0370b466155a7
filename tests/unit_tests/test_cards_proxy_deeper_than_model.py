"""``<model>-proxy-<N>L`` with N above the model's own depth is refused: such counts (``proxy-99999999999996L``)
ended in a MemoryError or a hang in ``oellm flops`` / ``oellm plan``, which list every layer."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cards import PUBLISHED_CARDS, CardError, get_card
from megatron.oellm.cli import main


@pytest.mark.parametrize("name", sorted(PUBLISHED_CARDS))
def test_a_proxy_deeper_than_its_model_is_refused(name: str) -> None:
    card = PUBLISHED_CARDS[name]
    deeper = card.num_layers + card.full_attention_interval * random.randint(1, 10**6)
    with pytest.raises(CardError, match=rf"at most the {card.num_layers} layers of {name}"):
        get_card(f"{name}-proxy-{deeper}L")


@pytest.mark.parametrize("name", sorted(PUBLISHED_CARDS))
def test_the_full_depth_stays_a_proxy(name: str) -> None:
    card = PUBLISHED_CARDS[name]
    assert get_card(f"{name}-proxy-{card.num_layers}L").num_layers == card.num_layers


def test_a_count_too_long_for_int_is_refused_the_same_way() -> None:
    digits = "9" * random.randint(5000, 6000)
    with pytest.raises(CardError, match=r"proxy-99999999\.\.\. \(\d+ digits\)L: a proxy has at most"):
        get_card(f"qwen3-30b-a3b-proxy-{digits}L")


def test_oellm_flops_refuses_in_one_line(capsys) -> None:
    layers = random.randint(10**12, 10**15)
    assert main(["flops", f"qwen3-30b-a3b-proxy-{layers}L", "--seq-length", "4096"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a proxy has at most the 48 layers of qwen3-30b-a3b" in err[0]
