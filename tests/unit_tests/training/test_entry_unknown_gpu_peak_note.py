"""On a GPU without a known peak the ``[oellm]`` line prints ``MFU: n/a``; the entry says why, and how to give the
peak, once per job (rank 0), so that a log reader is not left with an unexplained n/a."""

from __future__ import annotations

import argparse
import random

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.training import entry
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv

CARD = "qwen3-30b-a3b-tiny"


def _args(rank: int) -> argparse.Namespace:
    """A run's parsed arguments with the fields :func:`entry.flops_and_peak` reads."""
    seq_length = random.choice([64, 128, 256])
    args = parse_oellm_argv(merge_card_flags(["--oellm-model", CARD, "--seq-length", str(seq_length)]).argv)
    args.padded_vocab_size = get_card(CARD).vocab_size
    args.rank = rank
    return args


@pytest.mark.parametrize("device", ["NVIDIA L40S", "AMD Instinct MI250X", "Tesla V100-SXM2-32GB"])
def test_rank_0_names_the_gpu_and_the_flag_when_no_peak_is_known(monkeypatch, capsys, device):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: device)
    _, peak = entry.flops_and_peak(_args(rank=0))
    out = capsys.readouterr().out
    assert peak is None
    assert out.count("\n") == 1 and out.startswith("note: ")
    assert repr(device) in out and "MFU n/a" in out and "--oellm-peak-tflops" in out


def test_other_ranks_stay_quiet_and_a_known_gpu_needs_no_note(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA L40S")
    assert entry.flops_and_peak(_args(rank=random.randrange(1, 512)))[1] is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA H100 80GB HBM3")
    assert entry.flops_and_peak(_args(rank=0))[1] == 989.0
    given = _args(rank=0)
    given.oellm_peak_tflops = random.uniform(100, 900)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA L40S")
    assert entry.flops_and_peak(given)[1] == given.oellm_peak_tflops
    assert capsys.readouterr().out == ""
