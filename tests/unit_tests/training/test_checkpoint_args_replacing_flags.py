"""``--use-checkpoint-args`` with a flag megatron-core 0.19.2's ``load_args_from_checkpoint`` sets from the checkpoint
whatever the command line says (dropout, router scoring, interleaved RoPE): the run would train with the checkpoint's
value, the user's flag ignored without a word. The entry refuses a given flag whose value the checkpoint replaces."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from megatron.oellm.training import load_checks
from megatron.oellm.training.args import explicit_destinations
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import checkpoint_with_args, entry_args, finetune_argv
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line


def _megatron_loaded(argv: list[str]) -> argparse.Namespace:
    """``argv``'s arguments after megatron-core's own ``load_args_from_checkpoint``."""
    from megatron.training import checkpointing

    run = entry_args(argv)
    run.use_dist_ckpt = True
    checkpointing.load_args_from_checkpoint(run)
    return run


def test_a_given_dropout_the_checkpoint_replaces_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--hidden-dropout`` given with another value than the checkpoint's: one error line naming the flag, both
    values and the fix. The checkpoint's own value given goes on, and so does a run giving none (megatron replaces
    the entry's training default, not a flag of the user's)."""
    entry = entry_up_to_pretrain(monkeypatch)
    stored, given = round(random.uniform(0.05, 0.2), 3), round(random.uniform(0.25, 0.5), 3)
    load = checkpoint_with_args(tmp_path, hidden_dropout=stored, attention_dropout=stored)
    assert _megatron_loaded(finetune_argv(load, "--hidden-dropout", str(given))).hidden_dropout == stored
    line = refused_line(entry, capsys, finetune_argv(load, "--hidden-dropout", str(given)))
    assert (f"error: --use-checkpoint-args: megatron-core would set hidden_dropout to {stored!r}, the value --load "
            f"{load} stores, over --hidden-dropout's {given!r}") in line
    assert line.endswith("drop --use-checkpoint-args, or drop --hidden-dropout")
    for flags in (["--hidden-dropout", str(stored)], []):
        with pytest.raises(Reached):
            entry.main(finetune_argv(load, *flags))


@pytest.mark.parametrize(("flags", "dest", "stored"), [
    (["--moe-router-score-function", "sigmoid"], "moe_router_score_function", "softmax"),
    (["--moe-router-enable-expert-bias"], "moe_router_enable_expert_bias", False),
    (["--moe-router-topk-scaling-factor", "RANDOM"], "moe_router_topk_scaling_factor", "RANDOM"),
    (["--rotary-interleaved"], "rotary_interleaved", False),
    (["--attention-dropout", "RANDOM"], "attention_dropout", "RANDOM"),
])
def test_given_router_and_rope_flags_the_checkpoint_replaces_are_refused(tmp_path: Path, flags: list[str], dest: str,
                                                                         stored: object) -> None:
    """Each flag megatron replaces: refused naming it with both values; without ``--use-checkpoint-args`` it is the
    run's to choose."""
    flags = [str(round(random.uniform(0.1, 0.9), 3)) if flag == "RANDOM" else flag for flag in flags]
    stored = round(random.uniform(1.0, 3.0), 3) if stored == "RANDOM" else stored
    load = checkpoint_with_args(tmp_path, **{dest: stored})
    argv = finetune_argv(load, *flags)
    assert getattr(_megatron_loaded(argv), dest) == stored
    run = entry_args(argv)
    with pytest.raises(ValueError, match=rf"would set {dest} to {stored!r}, .* over {flags[0]}'s "
                                         rf"{getattr(run, dest)!r}, .*drop --use-checkpoint-args, or drop {flags[0]}"):
        load_checks.check_checkpoint_architecture(run, read_loaded_checkpoint(run), explicit_destinations(argv))
    own = entry_args([flag for flag in argv if flag != "--use-checkpoint-args"])
    load_checks.check_checkpoint_architecture(own, read_loaded_checkpoint(own), explicit_destinations(argv))
