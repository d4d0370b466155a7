"""Model names match whatever their case and every output says the canonical name; ``oellm plan --vpp`` says it
counts virtual stages per pipeline rank, not layers per virtual stage."""

import argparse
import json
import random
import re

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import PUBLISHED_CARDS, CardError, get_card
from megatron.oellm.commands import plan


def _random_case(name: str) -> str:
    """``name`` with a fresh random mix of upper and lower case, at least one letter upper."""
    letters = [i for i, char in enumerate(name) if char.isalpha()]
    upper = set(random.sample(letters, random.randint(1, len(letters))))
    return "".join(char.upper() if i in upper else char for i, char in enumerate(name))


@pytest.mark.parametrize("name", sorted(PUBLISHED_CARDS))
def test_a_published_name_in_any_case_is_the_card_under_its_canonical_name(name):
    """``oellm plan QWEN3-30B-A3B`` was an unknown model, with no suggestion."""
    card = get_card(_random_case(name))
    assert card == PUBLISHED_CARDS[name] and card.name == name


@pytest.mark.parametrize("name", sorted(PUBLISHED_CARDS))
def test_flavours_in_any_case_carry_the_canonical_name(name):
    card = PUBLISHED_CARDS[name]
    layers = random.randint(2, min(9, card.num_layers // card.full_attention_interval)) * card.full_attention_interval
    assert get_card(_random_case(f"{name}-tiny")).name == f"{name}-tiny"
    proxy = get_card(_random_case(f"{name}-proxy-{layers}L"))
    assert proxy.name == f"{name}-proxy-{layers}L" and proxy.num_layers == layers


def test_an_unknown_name_in_capitals_suggests_the_canonical_one():
    with pytest.raises(CardError, match="did you mean 'qwen3-30b-a3b'"):
        get_card("QWEN3-30B-A3")


def test_plan_and_flops_print_the_canonical_name(capsys):
    assert cli.main(["plan", "QWEN3-30B-A3B", "--nodes", "1", "--ep", "4"]) == 0
    assert capsys.readouterr().out.startswith("model        qwen3-30b-a3b  (")
    assert cli.main(["flops", "Qwen3.5-35B-A3B", "--seq-length", "4096", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "qwen3.5-35b-a3b"


def test_vpp_help_counts_virtual_stages_per_rank_not_layers_per_stage():
    """Jupiter's config says ``num_layers_per_virtual_pipeline_stage: 4``: read as --vpp 4, that is another layout."""
    parser = argparse.ArgumentParser()
    plan.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "number of virtual pipeline stages per PP rank" in text
    assert "not layers per virtual stage" in text


def test_vpp_help_says_how_to_plan_a_split_counting_the_embedding_and_the_loss(capsys):
    """The help's ``layers / (PP x N)`` gave no VPP for Jupiter's config (94 layers, PP 8, N 4), and ``--vpp 3`` is
    refused: the recipe counts the embedding and the loss as a layer each. The help names that reading (Megatron's
    flags for it) and the ``--pipeline-layout`` to plan it with; the layout it shows plans Jupiter's VPP 3."""
    parser = argparse.ArgumentParser()
    plan.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    vpp_help = text[text.index("--vpp VPP number"):text.index("--ep EP expert")]
    assert "(layers + 2) / (PP x N)" in vpp_help
    assert "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split" in vpp_help
    layout = re.search(r"a split given as --pipeline-layout, e\.g\. '(?P<layout>[^']+)' for Jupiter's", vpp_help)
    assert cli.main(["plan", "qwen3-235b-a22b", "--nodes", "64", "--tp", "2", "--pp", "8", "--ep", "16", "--etp", "1",
                     "--sp", "--pipeline-layout", layout["layout"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["vpp_size"] == 3
