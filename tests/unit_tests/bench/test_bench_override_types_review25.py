"""``oellm bench --ours-config``: a bool field given as ``true`` / ``false`` reaches our sides' TransformerConfig as
that bool (the string ``"false"`` is truthy, so it turned the setting on), another word for a bool is refused before
the GPU work, and a plain-string value loses its surrounding blanks (megatron-core compares ``moe_router_dtype`` with
``"fp32"`` exactly). CPU: CUDA and the benchmark itself are faked."""

import argparse
import random

import pytest
import torch

from megatron.oellm.bench import harness
from megatron.oellm.bench.sides import ours_transformer_config
from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.commands.bench import add_arguments, ours_overrides

TINY = "qwen3.5-35b-a3b-tiny"


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
