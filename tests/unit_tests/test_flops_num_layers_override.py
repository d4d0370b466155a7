"""``oellm flops --megatron-compatible --megatron-flag num-layers=N``: refused on a hybrid card unless its layer
pattern is dropped (Megatron counts the pattern and ignored N without a word), and refused below 1 on any card."""

import json
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card
from megatron.oellm.flops import FlopError, megatron_namespace

COMPATIBLE = ["--seq-length", "4096", "--megatron-compatible"]


def _flops(model: str, *flags: str) -> list[str]:
    return ["flops", model, *COMPATIBLE, *(item for flag in flags for item in ("--megatron-flag", flag))]


@pytest.mark.parametrize("spelling", ["num-layers", "num_layers"])
def test_num_layers_on_a_hybrid_card_is_refused_in_one_line(spelling, capsys):
    layers = random.randint(1, 80)
    assert cli.main(_flops("qwen3.5-35b-a3b", f"{spelling}={layers}")) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"oellm flops: error: --megatron-flag num-layers={layers}: Megatron counts "
                                   "qwen3.5-35b-a3b here as a hybrid model")
    assert "hybrid-layer-pattern=none" in captured.err


def test_num_layers_beside_a_pattern_override_of_a_gpt_card_is_refused(capsys):
    assert cli.main(_flops("qwen3-30b-a3b", f"num-layers={random.randint(1, 80)}", "hybrid-layer-pattern=*E*E")) == 2
    assert "as a hybrid model" in capsys.readouterr().err


def test_num_layers_counts_once_the_hybrid_pattern_is_dropped(capsys):
    small, large = sorted(random.sample(range(4, 81, 4), 2))
    totals = []
    for layers in (small, large):
        assert cli.main([*_flops("qwen3.5-35b-a3b", f"num-layers={layers}", "hybrid-layer-pattern=none"), "--json"]) == 0
        totals.append(json.loads(capsys.readouterr().out)["gflops_per_token"])
    assert totals[0] < totals[1]


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "qwen3.5-35b-a3b"])
def test_num_layers_below_one_is_refused_on_any_card(model, capsys):
    layers = -random.randint(0, 50)
    assert cli.main(_flops(model, f"num-layers={layers}", "hybrid-layer-pattern=none")) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"oellm flops: error: --megatron-flag num-layers={layers}: a model needs at least one decoder layer; give "
        "num-layers >= 1\n")


def test_the_library_refuses_as_the_command_does():
    with pytest.raises(FlopError, match="as a hybrid model"):
        megatron_namespace(get_card("qwen3.5-35b-a3b"), 4096, 262144, num_layers=random.randint(1, 80))
