"""A ``--load`` that names a file: megatron-core 0.19.2 looks for its tracker file in the folder ``--load`` names
(its own ``checkpoint_exists`` says there is none), prints a warning and trains from random weights. The entry refuses
it before Megatron initialises, in one line naming the flag."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import check_load_directory
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, Reached, entry_up_to_pretrain, refused_line


def _a_file(tmp_path: Path) -> Path:
    """A file where a checkpoint folder should be (a log, a tarball), with random text in it."""
    path = tmp_path / random.choice(["run1.log", "ckpt.tar", "latest_checkpointed_iteration.txt"])
    path.write_text(f"{random.random()}\n")
    return path


def test_megatron_finds_no_checkpoint_in_a_file(tmp_path):
    """What the check guards against, by megatron-core's own test of a load directory."""
    from megatron.training.checkpointing import checkpoint_exists

    assert not checkpoint_exists(str(_a_file(tmp_path)))


@pytest.mark.parametrize("step", [None, random.randint(1, 1000)])
def test_a_load_that_is_a_file_is_refused_in_one_line(step, tmp_path, monkeypatch, capsys):
    load = _a_file(tmp_path)
    argv = ["--load", str(load), *(["--ckpt-step", str(step)] if step else [])]
    with pytest.raises(ValueError, match=f"^--load {load} is a file: .*trains from random weights"):
        check_load_directory(parse_oellm_argv(argv))
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*TINY_MOE_RUN, *argv])
    assert f"error: --load {load} is a file: " in line and line.endswith("saved the checkpoint into")


def test_a_load_folder_that_does_not_exist_yet_passes(tmp_path, monkeypatch):
    """The first job of a run whose --load is its --save: nothing to load yet, a fresh start by design."""
    load = tmp_path / f"run-{random.randint(0, 10**6)}"
    check_load_directory(parse_oellm_argv(["--load", str(load), "--save", str(load)]))
    with pytest.raises(Reached):
        entry_up_to_pretrain(monkeypatch).main([*TINY_MOE_RUN, "--load", str(load), "--save", str(load),
                                                "--save-interval", "5"])
