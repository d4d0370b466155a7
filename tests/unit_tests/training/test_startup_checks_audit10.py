"""Audit 10 of :mod:`megatron.oellm.training.startup_checks`: the parsed-arguments phase refuses, at the training
entry, the command lines megatron-core 0.19.2's ``validate_args`` asserts without a message (``--fp16`` beside
``--bf16``, ``--save`` without a usable ``--save-interval`` or ``--save-retain-interval``), in one error line naming
the flags, before megatron's validation runs (here a plain parse, which would let them through)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "128",
        "--micro-batch-size", "1", "--global-batch-size", "8", "--train-iters", "10"]


def test_fp16_beside_bf16_is_refused_at_the_entry(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """megatron asserts ``not args.bf16`` under ``--fp16`` with no message: the entry names both flags."""
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*ARGV, *random.sample(["--fp16", "--bf16"], 2)])
    assert line.endswith("error: --fp16 and --bf16 together: a run trains in one of them; keep --bf16 (the recipes' "
                         "precision) or --fp16")
    with pytest.raises(Reached):
        entry.main([*ARGV, "--bf16"])


def test_a_save_without_a_usable_interval_is_refused_at_the_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--save`` without ``--save-interval`` (or with a non-positive one), and a ``--save-retain-interval`` off the
    saved iterations: each refused in one line naming the flags and values; a multiple of the interval goes on."""
    entry = entry_up_to_pretrain(monkeypatch)
    save = ["--save", str(tmp_path / "save")]
    line = refused_line(entry, capsys, [*ARGV, *save])
    assert f"error: --save {tmp_path / 'save'} without --save-interval: " in line
    line = refused_line(entry, capsys, [*ARGV, *save, "--save-interval", str(-random.randrange(0, 5))])
    assert f"error: --save {tmp_path / 'save'} with --save-interval " in line
    interval = random.randrange(2, 50)
    retain = interval * random.randrange(1, 5) + random.randrange(1, interval)
    line = refused_line(entry, capsys, [*ARGV, *save, "--save-interval", str(interval), "--save-retain-interval",
                                        str(retain)])
    assert f"error: --save-retain-interval {retain} is not a positive multiple of --save-interval {interval}" in line
    with pytest.raises(Reached):
        entry.main([*ARGV, *save, "--save-interval", str(interval), "--save-retain-interval", str(retain - retain %
                                                                                                    interval)])
