"""``--exit-on-missing-checkpoint`` (also on for ``--ckpt-convert-format``) in a run with no checkpoint to load: megatron
0.19.2 either never looks (no ``--load``: the flag does nothing, the run trains from random weights) or builds the
model and then ends the job with ``sys.exit()``, exit status 0. The training entry refuses both in one line."""

from __future__ import annotations

import inspect
import random
import types
from pathlib import Path

import pytest

from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16", "--mock-data",
        "--micro-batch-size", "1", "--global-batch-size", "8", "--lr", "3e-4", "--train-iters", "100"]


def _megatron_loads(load_dir: Path, exit_on_missing: bool) -> object:
    """What megatron-core's ``_load_base_checkpoint`` does for ``load_dir``: its result, or ``("exit", code)``."""
    from megatron.training import checkpointing

    args = types.SimpleNamespace(non_persistent_ckpt_type=None, exit_on_missing_checkpoint=exit_on_missing,
                                 ckpt_step=None, non_persistent_global_ckpt_dir=None)
    try:
        return checkpointing._load_base_checkpoint(str(load_dir), args, rank0=False)
    except SystemExit as stop:
        return "exit", stop.code


def test_a_load_directory_without_a_checkpoint_is_refused(monkeypatch, capsys, tmp_path):
    """megatron exits with status 0 (``sys.exit()`` without a code) where the flag is set and ``--load`` holds no
    tracker; without the flag it starts from random weights (a first job, --load being --save), which the entry lets
    through."""
    load = tmp_path / f"run{random.randint(0, 999)}"
    load.mkdir()
    assert _megatron_loads(load, True) == ("exit", None)
    assert _megatron_loads(load, False) == (None, "", False, None)
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*BASE, "--load", str(load), "--exit-on-missing-checkpoint"])
    assert (f"--exit-on-missing-checkpoint with --load {load}, which holds no checkpoint "
            "(latest_checkpointed_iteration.txt): megatron-core builds the model on every rank, then ends the job "
            "with exit status 0") in line
    with pytest.raises(Reached):  # a first job
        entry.main([*BASE, "--load", str(load), "--save", str(load), "--save-interval", "50"])
    missing = [*BASE, "--load", str(tmp_path / "missing"), "--exit-on-missing-checkpoint"]
    assert "which holds no checkpoint" in refused_line(entry, capsys, missing)


def test_the_flag_without_a_checkpoint_to_load_is_refused(monkeypatch, capsys):
    """megatron's ``setup_model_and_optimizer`` loads only with ``--load`` or ``--pretrained-checkpoint``, so the
    flag alone does nothing and the run trains from random weights."""
    from megatron.training import training

    assert "args.load is not None or args.pretrained_checkpoint is not None" in inspect.getsource(
        training.setup_model_and_optimizer)
    entry = entry_up_to_pretrain(monkeypatch)
    assert ("--exit-on-missing-checkpoint without --load: megatron-core loads no checkpoint, so the flag does "
            "nothing") in refused_line(entry, capsys, [*BASE, "--exit-on-missing-checkpoint"])


def test_a_saved_checkpoint_passes_and_the_conversion_flag_is_named(tmp_path):
    """A ``--load`` whose tracker names a saved iteration is what the flag expects; megatron's ``validate_args``
    turns the flag on for ``--ckpt-convert-format``, which the refusal then names (the user never typed the flag)."""
    from megatron.oellm.training.args import parse_oellm_argv
    from megatron.oellm.training.stored_checkpoint import check_exit_on_missing_checkpoint

    iteration = random.randint(1, 10**5)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    (tmp_path / f"iter_{iteration:07d}").mkdir()
    args = parse_oellm_argv([*BASE, "--load", str(tmp_path), "--exit-on-missing-checkpoint"])
    check_exit_on_missing_checkpoint(args)
    args.load, args.ckpt_convert_format = None, "torch_dist"
    with pytest.raises(ValueError, match=r"^--exit-on-missing-checkpoint \(on for --ckpt-convert-format\) without "
                                         "--load"):
        check_exit_on_missing_checkpoint(args)
