"""``oellm bench --ours-config FIELD=VALUE``: what a value becomes in our sides' TransformerConfig, and which values
are refused before any GPU work. A bool field given as ``true`` / ``false`` is that bool (the string ``"false"`` is
truthy, so it turned the setting on), another word for a bool is refused, and a plain-string value loses its
surrounding blanks (megatron-core compares ``moe_router_dtype`` with ``"fp32"`` exactly). Shape fields are checked
against the model card: a value the card's validation refuses, or a weight shape other than the card's (our sides
load transformers' weights of it). CPU: CUDA and the benchmark itself are faked."""

from __future__ import annotations

import argparse
import random

import pytest
import torch

from megatron.oellm.bench import harness
from megatron.oellm.bench.harness import BenchConfig
from megatron.oellm.bench.sides import ours_transformer_config
from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.commands.bench import add_arguments, ours_overrides

TINY = "qwen3.5-35b-a3b-tiny"
PROXY = "qwen3.5-35b-a3b-proxy-4L"
"""The card whose shapes the shape-field tests compare overrides with (TINY: the value-type tests)."""


def _random_case(word: str) -> str:
    """``word`` with each letter upper- or lower-case at random (``fAlSe``)."""
    return "".join(random.choice((c.lower(), c.upper())) for c in word)


def _config_of(argv: list[str]):
    """Our sides' TransformerConfig for ``oellm bench ARGV`` on the tiny card, as the bench builds it."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return ours_transformer_config(get_card(TINY), ours_overrides(parser.parse_args(argv)))


@pytest.mark.parametrize("field", ["bias_activation_fusion", "cross_entropy_loss_fusion"])
def test_a_bool_field_given_as_a_word_is_that_bool(field: str) -> None:
    """Both fields are on in the benchmark's best settings: ``=false`` must turn them off."""
    off, on = _random_case("false"), _random_case("true")
    assert getattr(_config_of(["--ours-config", f"{field}={off}"]), field) is False
    assert getattr(_config_of(["--plain-ours", "--ours-config", f"{field}={on}"]), field) is True


def test_another_word_for_a_bool_field_is_an_error_line_before_the_gpu_work(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))
    word = random.choice(["off", "no", "yes", "on", "disabled"])
    argv = ["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1",
            "--ours-config", f"bias_activation_fusion={word}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm bench: error: ") and f"bias_activation_fusion={word!r}" in err and "True or False" in err
    assert len(err.strip().splitlines()) == 1


def test_a_string_value_loses_its_surrounding_blanks() -> None:
    """``fp64``, not the spec builder's own ``fp32``: the override, not the default, must be what the config holds."""
    assert _config_of([]).moe_router_dtype != "fp64"
    blanks = " " * random.randint(1, 3)
    config = _config_of(["--ours-config", f"moe_router_dtype={blanks}fp64{blanks}"])
    assert config.moe_router_dtype == "fp64"


@pytest.mark.parametrize("field", ["distribute_saved_activations", "moe_router_padding_for_fp8"])
def test_an_optional_bool_field_given_as_false_is_off(field: str) -> None:
    """Both are ``Optional[bool]`` in megatron-core's TransformerConfig, not ``bool``: ``=false`` stayed the truthy
    string ``"false"``, which turned FP8 router padding on (and its TransformerConfig then refused a run without
    FP8)."""
    config = _config_of(["--ours-config", f"{field}={_random_case('false')}"])
    assert getattr(config, field) is False
    assert config.moe_router_padding_for_quantization is False


def _refused(overrides: dict) -> str:
    with pytest.raises(ValueError) as refused:
        BenchConfig(model=PROXY, sides=("ours",), ours_overrides=overrides)
    return str(refused.value)


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "kv_channels", "num_moe_experts",
                                   "moe_ffn_hidden_size", "linear_num_value_heads"])
def test_non_positive_shape_value_is_refused_by_the_card_check(field):
    value = random.choice([0, -random.randint(1, 4096)])
    message = _refused({field: value})
    # a negative linear-attention head count reads "must be 0 (none) or positive" (0 means no linear mixer)
    assert f"--ours-config {field}={value}" in message
    assert "must be positive" in message or "must be 0 (none) or positive" in message


def test_heads_not_a_multiple_of_the_query_groups_are_refused():
    heads = random.choice([h for h in range(3, 64) if h % 2])  # the card has 2 query groups
    message = _refused({"num_attention_heads": heads})
    assert f"num_attention_heads ({heads}) must be a multiple of num_query_groups (2)" in message


def test_top_k_above_the_experts_is_refused():
    topk = random.randint(257, 1024)  # the card has 256 experts
    assert f"moe_router_topk ({topk}) exceeds num_experts (256)" in _refused({"moe_router_topk": topk})


@pytest.mark.parametrize("field", ["hidden_size", "num_moe_experts", "num_layers", "kv_channels"])
def test_a_valid_but_different_weight_shape_is_refused(field):
    # divisors of the card's values keep the card valid; the proxy has 2048 wide, 256 experts, 8 hybrid layers
    value = {"hidden_size": random.choice([512, 1024, 4096]), "num_moe_experts": random.choice([16, 32, 128]),
             "num_layers": random.choice([2, 4, 12]), "kv_channels": random.choice([64, 128, 512])}[field]
    message = _refused({field: value})
    assert f"--ours-config {field}={value}" in message and "another shape" in message


def test_the_cards_own_values_and_router_settings_still_pass():
    # from 2: megatron-core refuses top-1 routing without pre-softmax, which the card's router does not use
    topk = random.randint(2, 256)
    config = BenchConfig(model=PROXY, sides=("ours",),
                         ours_overrides={"hidden_size": 2048, "num_layers": 8, "moe_router_topk": topk})
    assert config.ours_overrides["moe_router_topk"] == topk
