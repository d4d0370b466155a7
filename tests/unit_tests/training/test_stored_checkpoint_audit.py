"""Reads and checks of the checkpoint a run loads (``megatron.oellm.training.stored_checkpoint``) that a mutation
audit found untested: each test fails when the behaviour it names is dropped or changed."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import (
    PRETRAINED,
    TRACKER_FILE,
    check_exit_on_missing_checkpoint,
    check_load_directory,
    iteration_directory_loaded,
    load_source,
    persistent_iteration_directory,
    read_stored_checkpoint,
    tracked_checkpoint,
)

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--seq-length", "16", "--mock-data"]


def test_a_tracker_naming_iteration_minus_one_is_refused(tmp_path: Path) -> None:
    """megatron-core's ``read_metadata`` starts from iteration -1 and asserts ``iteration > -1``: a tracker naming -1
    fails that assertion after the model is allocated on every rank, as any negative iteration does, so the entry
    refuses -1 too (and still reads 0, which megatron loads)."""
    from megatron.training.checkpointing import read_metadata

    (tmp_path / TRACKER_FILE).write_text("-1\n")
    with pytest.raises(AssertionError):
        read_metadata(str(tmp_path / TRACKER_FILE))
    with pytest.raises(ValueError, match=r"names iteration -1: megatron-core fails an assertion"):
        tracked_checkpoint(tmp_path)
    (tmp_path / TRACKER_FILE).write_text("0\n")
    assert read_metadata(str(tmp_path / TRACKER_FILE)) == (0, False)
    assert tracked_checkpoint(tmp_path) == 0


def test_a_directory_named_like_the_tracker_is_no_tracker(tmp_path: Path) -> None:
    """megatron-core looks for the tracker with ``os.path.isfile``: a directory of that name is no tracker, so it
    loads nothing from ``--load`` (a first job) or, beside ``--pretrained-checkpoint``, loads that one. The entry must
    see the same, not refuse the run for a tracker it cannot read."""
    from megatron.training.checkpointing import checkpoint_exists

    load = tmp_path / "run"
    (load / TRACKER_FILE).mkdir(parents=True)
    assert not checkpoint_exists(str(load))
    assert tracked_checkpoint(load) is None
    assert persistent_iteration_directory(load) is None
    pretrained = tmp_path / f"base{random.randrange(10**6)}"
    args = parse_oellm_argv([*BASE, "--load", str(load), "--pretrained-checkpoint", str(pretrained)])
    assert load_source(args) == (PRETRAINED, pretrained)


def test_a_release_checkpoint_under_ckpt_step_is_weighed_at_that_step_against_a_non_persistent_one(
        tmp_path: Path) -> None:
    """With a ``release`` tracker and ``--ckpt-step STEP``, megatron-core keeps ``release`` but takes STEP as the
    persistent iteration its global non-persistent checkpoint must reach: an older non-persistent checkpoint leaves
    ``release`` loaded (and checked), one at least at STEP is loaded instead."""
    load = tmp_path / "run"
    (load / "release").mkdir(parents=True)
    (load / TRACKER_FILE).write_text("release\n")
    (load / "non_persistent").mkdir()
    step = random.randrange(10, 10**5)
    args = parse_oellm_argv(["--load", str(load), "--non-persistent-ckpt-type", "global", "--ckpt-step", str(step)])
    older = random.randrange(1, step)
    (load / "non_persistent" / TRACKER_FILE).write_text(f"{older}\n")
    assert iteration_directory_loaded(args) == load / "release"
    newer = step + random.randrange(0, 100)
    (load / "non_persistent" / TRACKER_FILE).write_text(f"{newer}\n")
    assert iteration_directory_loaded(args) == load / "non_persistent" / f"iter_{newer:07d}"


def test_a_rank_file_that_holds_no_state_dict_is_left_to_megatron(tmp_path: Path) -> None:
    """A ``torch``-format rank file that unpickles to something other than a dict (a foreign or damaged file) has no
    stored run arguments to check: the read gives no checkpoint (megatron's loader reports it), rather than one
    whose checks then fail with a traceback on ``.get``; the same file holding a dict is read."""
    iteration = random.randrange(1, 10**5)
    rank_dir = tmp_path / f"iter_{iteration:07d}" / "mp_rank_00"
    rank_dir.mkdir(parents=True)
    (tmp_path / TRACKER_FILE).write_text(f"{iteration}\n")
    torch.save([torch.randn(3), iteration], rank_dir / "model_optim_rng.pt")
    assert read_stored_checkpoint(tmp_path) is None
    stored = argparse.Namespace(tensor_model_parallel_size=1, iteration=iteration)
    torch.save({"args": stored, "iteration": iteration}, rank_dir / "model_optim_rng.pt")
    checkpoint = read_stored_checkpoint(tmp_path)
    assert checkpoint is not None and checkpoint.ckpt_format == "torch"
    assert checkpoint.common["iteration"] == iteration and checkpoint.common["args"] == stored


def test_a_missing_ckpt_step_lists_the_held_iterations_in_order(tmp_path: Path) -> None:
    """The refusal of a ``--ckpt-step`` megatron finds no checkpoint at lists the iterations ``--load`` holds, in
    ascending order whatever order the file system lists them in, and only iteration directories (not a stray file
    named like one)."""
    held = random.sample(range(1, 10**6), 6)
    for iteration in held:  # created in random order
        (tmp_path / f"iter_{iteration:07d}").mkdir()
    stray = max(held) + 1
    (tmp_path / f"iter_{stray:07d}").write_text("not a checkpoint")
    (tmp_path / TRACKER_FILE).write_text(f"{held[0]}\n")
    missing = stray + random.randrange(1, 100)
    args = parse_oellm_argv([*BASE, "--load", str(tmp_path), "--ckpt-step", str(missing)])
    with pytest.raises(ValueError, match=rf"^--ckpt-step {missing}: .* which does not exist") as refused:
        check_load_directory(args)
    assert str(refused.value).endswith(f"; it holds iterations {', '.join(map(str, sorted(held)))}")


def test_exit_on_missing_checkpoint_is_left_to_megatron_with_local_non_persistent_checkpoints(tmp_path: Path) -> None:
    """Under ``--non-persistent-ckpt-type local`` megatron-core may resume from a local non-persistent checkpoint
    that its manager finds (not read here) although ``--load`` holds no tracker: ``--exit-on-missing-checkpoint``
    is then megatron's to judge, while a global (or no) non-persistent type with an empty ``--load`` is refused."""
    load = tmp_path / "run"
    load.mkdir()
    argv = [*BASE, "--load", str(load), "--exit-on-missing-checkpoint"]
    check_exit_on_missing_checkpoint(parse_oellm_argv([*argv, "--non-persistent-ckpt-type", "local"]))
    for refused in ([], ["--non-persistent-ckpt-type", "global"]):
        with pytest.raises(ValueError, match=rf"^--exit-on-missing-checkpoint with --load {load}, which holds no "
                                             "checkpoint"):
            check_exit_on_missing_checkpoint(parse_oellm_argv([*argv, *refused]))
