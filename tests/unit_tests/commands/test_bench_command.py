"""``oellm bench`` argument parsing, configuration checks and the refusal without CUDA (CPU)."""

import argparse
from pathlib import Path

import pytest
import torch

from megatron.oellm.bench.harness import BenchConfig
from megatron.oellm.bench.sides import BEST_OURS_SETTINGS
from megatron.oellm.cli import build_parser, main
from megatron.oellm.commands import bench


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_defaults() -> None:
    args = parse()
    assert args.model == "qwen3.5-35b-a3b-proxy-4L" and args.seq_length == 4096
    assert args.mbs == (1, 2, 4, 8) and (args.warmup, args.steps) == (3, 10)
    assert args.sides == ("ours", "hf") and args.profile is None and not args.json
    assert bench.ours_overrides(args) == BEST_OURS_SETTINGS


def test_lists_and_overrides_are_parsed() -> None:
    args = parse("--mbs", "4,1,2", "--sides", "hf", "--ours-config", "moe_token_dispatcher_type=allgather",
                 "--ours-config", "bias_activation_fusion=False", "--ours-config", "recompute_num_layers=2",
                 "--profile", "prof", "--json")
    assert args.mbs == (4, 1, 2) and args.sides == ("hf",) and args.profile == Path("prof") and args.json
    overrides = bench.ours_overrides(args)
    assert overrides["moe_token_dispatcher_type"] == "allgather"
    assert overrides["bias_activation_fusion"] is False and overrides["recompute_num_layers"] == 2
    assert overrides["cross_entropy_loss_fusion"] is True  # best settings kept underneath


def test_plain_ours_drops_the_best_settings() -> None:
    args = parse("--plain-ours", "--ours-config", "moe_token_dispatcher_type=allgather")
    assert bench.ours_overrides(args) == {"moe_token_dispatcher_type": "allgather"}


@pytest.mark.parametrize("argv", [["--mbs", "1,x"], ["--mbs", "0,2"], ["--mbs", ""], ["--sides", "ours,tf"],
                                  ["--ours-config", "no_equals_sign"], ["--ours-config", "=3"]])
def test_bad_values_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    assert "oellm bench: error: argument" in capsys.readouterr().err


def test_refuses_without_cuda(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--mbs", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_config_rejects_cards_transformers_cannot_mirror_and_bad_values() -> None:
    with pytest.raises(ValueError, match="qwen3.5-35b-a3b flavour"):
        BenchConfig(model="qwen3-30b-a3b-proxy-2L")
    with pytest.raises(ValueError, match="unknown sides"):
        BenchConfig(sides=("ours", "deepspeed"))
    with pytest.raises(ValueError, match="warmup"):
        BenchConfig(warmup=0)
    with pytest.raises(ValueError, match="seq_length"):
        BenchConfig(seq_length=1)
    assert BenchConfig(model="qwen3.5-35b-a3b-tiny", seq_length=128).mbs == (1, 2, 4, 8)
