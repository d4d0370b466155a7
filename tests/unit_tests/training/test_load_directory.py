"""Which checkpoint ``--load`` makes megatron-core 0.19.2 load, and whether the run's ``--ckpt-format`` can load it:
an iteration directory passed as ``--load`` (megatron finds no tracker, loads nothing and trains from random
weights) and a format the run's ``--ckpt-format`` cannot load (megatron fails after allocating the model) are
refused before Megatron initialises."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from megatron.core.dist_checkpointing.core import CheckpointingConfig, save_config

from megatron.oellm.training.checkpoint_layout import check_checkpoint_format
from megatron.oellm.training.stored_checkpoint import (
    check_load_directory,
    persistent_iteration_directory,
    read_stored_checkpoint,
)
from tests.unit_tests.training.checkpoint_helpers import run_args, save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain


def _save(load: Path, fmt: str, iteration: int) -> Path:
    """``load/iter_XXXXXXX`` as megatron-core writes a ``torch_dist`` checkpoint (DCP + ``metadata.json`` +
    ``common.pt``), a ``torch_dcp`` one (DCP with the arguments in the state dict) or a ``torch`` one (rank files),
    and the tracker naming it."""
    directory = load / f"iter_{iteration:07d}"
    args = argparse.Namespace(tensor_model_parallel_size=1, iteration=iteration)
    tensors = {"x": torch.randn(random.randrange(2, 9))}
    if fmt == "torch":
        (directory / "mp_rank_00").mkdir(parents=True)
        torch.save({"args": args, "iteration": iteration, "model": tensors},
                   directory / "mp_rank_00" / "model_optim_rng.pt")
    elif fmt == "torch_dcp":
        dcp.save({"args": args, "iteration": iteration, "model": tensors},
                 storage_writer=dcp.FileSystemWriter(directory), no_dist=True)
    else:
        dcp.save(tensors, storage_writer=dcp.FileSystemWriter(directory), no_dist=True)
        save_config(CheckpointingConfig("torch_dist", 1), str(directory))
        torch.save({"args": args, "iteration": iteration}, directory / "common.pt")
    (load / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return directory


def _run(load: Path, **flags) -> argparse.Namespace:
    """A run's arguments as far as these checks read them."""
    return argparse.Namespace(**{"load": str(load), "ckpt_step": None, "ckpt_format": "torch_dist",
                                 "auto_detect_ckpt_format": False, **flags})


@pytest.mark.parametrize("fmt", ["torch_dist", "torch_dcp", "torch"])
def test_the_read_directory_and_format_are_megatrons(tmp_path: Path, fmt: str) -> None:
    """The directory is megatron-core's ``get_load_checkpoint_path_by_args``, the format its
    ``_get_checkpoint_format``, and the stored iteration is read for each format."""
    from megatron.training.checkpointing import _get_checkpoint_format, get_load_checkpoint_path_by_args

    iteration = random.randrange(1, 10**6)
    directory = _save(tmp_path, fmt, iteration)
    _save(tmp_path, fmt, iteration + 1)
    for step in (None, iteration):
        run = _run(tmp_path, ckpt_step=step)
        assert persistent_iteration_directory(tmp_path, step) == Path(get_load_checkpoint_path_by_args(run))
    checkpoint = read_stored_checkpoint(tmp_path, iteration)
    assert checkpoint is not None and checkpoint.directory == directory
    assert checkpoint.ckpt_format == _get_checkpoint_format(str(directory), _run(tmp_path))
    assert checkpoint.common["iteration"] == iteration


@pytest.mark.parametrize("fmt", ["torch_dist", "torch_dcp", "torch"])
def test_an_iteration_directory_as_load_is_refused_naming_ckpt_step(tmp_path: Path, fmt: str) -> None:
    """megatron finds no tracker in the iteration directory and would train from random weights; the parent with
    --ckpt-step loads it, and so does the parent (tracker) or an empty directory (a first job: --load is --save)
    as --load."""
    iteration = random.randrange(1, 10**6)
    directory = _save(tmp_path, fmt, iteration)
    assert persistent_iteration_directory(directory) is None
    with pytest.raises(ValueError, match=rf"--load {directory} is a checkpoint's iteration directory .*trains "
                                         rf"from random weights; pass --load {tmp_path} --ckpt-step {iteration}$"):
        check_load_directory(_run(directory))
    check_load_directory(_run(tmp_path, ckpt_step=iteration))
    for load in (tmp_path, tmp_path / "empty", tmp_path / "missing"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        check_load_directory(_run(load, save=str(load)))


@pytest.mark.parametrize(("fmt", "run", "refused"), [
    ("torch_dist", "torch", True), ("torch_dcp", "torch_dist", True), ("torch_dcp", "torch", True),
    ("torch_dist", "torch_dist", False), ("torch", "torch_dist", False), ("torch", "torch", False),
    ("torch_dcp", "torch_dcp", False), ("torch_dcp", "fsdp_dtensor", False),
])
def test_a_format_the_run_cannot_load_is_refused(tmp_path: Path, fmt: str, run: str, refused: bool) -> None:
    """megatron-core loads a torch_dist checkpoint only under torch_dist, a DCP one only under torch_dcp /
    fsdp_dtensor; a torch one it detects under torch_dist too. ``--auto-detect-ckpt-format`` does not rescue a
    torch_dist checkpoint under torch: megatron detects the format but builds the state dict for the run's
    (``generate_state_dict`` reads ``args.ckpt_format``), and the distributed load drops its plain tensors."""
    _save(tmp_path, fmt, random.randrange(1, 10**6))
    checkpoint = read_stored_checkpoint(tmp_path)
    if refused:
        with pytest.raises(ValueError, match=rf"--load {tmp_path} \(iter_\d{{7}}\) is a .*--ckpt-format {run} "
                                             r"cannot load .*; pass "):
            check_checkpoint_format(_run(tmp_path, ckpt_format=run), checkpoint)
    else:
        check_checkpoint_format(_run(tmp_path, ckpt_format=run), checkpoint)
    if fmt == "torch_dist" and refused:
        with pytest.raises(ValueError, match="--auto-detect-ckpt-format does not help"):
            check_checkpoint_format(_run(tmp_path, ckpt_format=run, auto_detect_ckpt_format=True), checkpoint)


@pytest.mark.parametrize("run_format", ["torch_dcp", "fsdp_dtensor"])
def test_a_torch_dist_checkpoint_is_refused_under_the_dcp_formats(tmp_path: Path, run_format: str) -> None:
    """Under torch_dcp / fsdp_dtensor megatron builds plain tensors for a torch_dist checkpoint, which the
    distributed load drops: it fails on 'model' after allocating the model."""
    load = save_dist_checkpoint(tmp_path, stored_args())
    checkpoint = read_stored_checkpoint(load)
    with pytest.raises(ValueError, match=f"--ckpt-format {run_format} cannot load"):
        check_checkpoint_format(run_args(load, ckpt_format=run_format), checkpoint)
    check_checkpoint_format(run_args(load, ckpt_format="torch_dist"), checkpoint)


def test_the_entry_refuses_both_before_it_starts_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """One error line and exit status 2 from main() for each; the right flags go on."""
    entry = entry_up_to_pretrain(monkeypatch)
    directory = _save(tmp_path, "torch_dist", 12)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "64"]
    assert entry.main([*argv, "--load", str(directory)]) == 2
    assert entry.main([*argv, "--load", str(tmp_path), "--ckpt-format", "torch"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": error: ")[1][:60] for line in lines] == [
        f"--load {directory} is a checkpoint's iteration directory"[:60],
        f"--load {tmp_path} (iter_0000012) is a torch_dist checkpoint"[:60]]
    with pytest.raises(Reached):
        entry.main([*argv, "--load", str(tmp_path), "--ckpt-step", "12", "--ckpt-format", "torch_dist"])


def test_a_release_tracker_keeps_release_under_ckpt_step(tmp_path: Path) -> None:
    """megatron-core loads ``release`` when the tracker names it, whatever ``--ckpt-step`` says; the checks read the
    same directory, not an ``iter_`` one that megatron does not load."""
    from megatron.training.checkpointing import get_load_checkpoint_path_by_args

    step = random.randrange(1, 10**6)
    _save(tmp_path, "torch_dist", step)
    (tmp_path / "release").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release\n")
    megatrons = Path(get_load_checkpoint_path_by_args(_run(tmp_path, ckpt_step=step)))
    assert persistent_iteration_directory(tmp_path, step) == megatrons
    assert persistent_iteration_directory(tmp_path, step) == tmp_path / "release"
    assert read_stored_checkpoint(tmp_path, step) is None  # an empty release directory: megatron reports it


@pytest.mark.parametrize("fmt", ["torch_dist", "torch"])
def test_a_ckpt_step_megatron_finds_no_checkpoint_at_is_refused_naming_those_held(tmp_path: Path, fmt: str) -> None:
    """megatron-core reads ``--load``/iter_<step> under --ckpt-step whatever the tracker says and stops in
    ``_get_checkpoint_format`` (FileNotFoundError, or NotImplementedError for a directory holding no checkpoint)
    after allocating the model; an iteration directory given as ``--load`` with its own step is one such case."""
    held = sorted(random.sample(range(1, 10**6, 2), 2))  # odd: the iteration after the first is never held
    for iteration in held:
        directory = _save(tmp_path, fmt, iteration)
    missing = held[0] + 1
    with pytest.raises(ValueError, match=rf"--ckpt-step {missing}: megatron-core reads {tmp_path}/iter_{missing:07d} "
                                         rf"for --load {tmp_path}, which does not exist.*; it holds iterations "
                                         rf"{held[0]}, {held[1]}$"):
        check_load_directory(_run(tmp_path, ckpt_step=missing))
    (tmp_path / f"iter_{missing:07d}").mkdir()
    with pytest.raises(ValueError, match="which holds no checkpoint, and stops with NotImplementedError"):
        check_load_directory(_run(tmp_path, ckpt_step=missing))
    with pytest.raises(ValueError, match=rf"reads {directory}/iter_{held[1]:07d} for --load {directory}, which does "
                                         "not exist.*; it holds no iteration directory$"):
        check_load_directory(_run(directory, ckpt_step=held[1]))
    for iteration in held:
        check_load_directory(_run(tmp_path, ckpt_step=iteration))
    with pytest.raises(ValueError, match=r"--ckpt-step -1: megatron-core reads a negative step as no checkpoint"):
        check_load_directory(_run(tmp_path, ckpt_step=-1))


@pytest.mark.parametrize("flag", ["load", "pretrained_checkpoint"])
def test_a_tracker_naming_a_missing_or_empty_iteration_is_refused_naming_those_held(tmp_path: Path, flag: str) -> None:
    """Without ``--ckpt-step`` megatron-core reads the iteration the tracker names and stopped there after allocating
    the model (FileNotFoundError, or NotImplementedError for an empty directory) when a copy or clean-up had left the
    tracker behind; the refusal names the directory, what is held, and both fixes. A tracker naming a held
    iteration passes."""
    held = random.randrange(1, 10**6)
    _save(tmp_path, "torch_dist", held)
    named = held + random.randrange(1, 1000)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{named}\n")
    given = f"--{flag.replace('_', '-')} {tmp_path}"
    run = argparse.Namespace(**{"load": None, "pretrained_checkpoint": None, "ckpt_step": None, flag: str(tmp_path)})
    with pytest.raises(ValueError, match=rf"^{given}: megatron-core reads {tmp_path}/iter_{named:07d}, the iteration "
                                         rf"{tmp_path}/latest_checkpointed_iteration.txt names, which does not exist, "
                                         rf"and stops with FileNotFoundError .*; it holds iterations {held}: restore "
                                         rf"that directory, or write an iteration it holds into "
                                         rf"{tmp_path}/latest_checkpointed_iteration.txt$"):
        check_load_directory(run)
    (tmp_path / f"iter_{named:07d}").mkdir()
    with pytest.raises(ValueError, match="which holds no checkpoint, and stops with NotImplementedError"):
        check_load_directory(run)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{held}\n")
    check_load_directory(run)


@pytest.mark.parametrize("flag", ["load", "pretrained_checkpoint"])
def test_a_tracker_in_a_folder_of_no_iteration_names_no_iteration_to_write(tmp_path: Path, flag: str) -> None:
    """A tracker left alone (the iterations deleted or never copied): the second fix, writing an iteration the folder
    holds into the tracker, cannot apply, so the refusal names the folder of the run's checkpoints instead."""
    named = random.randrange(1, 10**6)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{named}\n")
    run = argparse.Namespace(**{"load": None, "pretrained_checkpoint": None, "ckpt_step": None, flag: str(tmp_path)})
    option = f"--{flag.replace('_', '-')}"
    with pytest.raises(ValueError, match=rf"; it holds no iteration directory: restore that directory, or name the "
                                         rf"folder that holds the run's checkpoints with {option}$"):
        check_load_directory(run)


def test_a_ckpt_step_megatron_would_apply_to_the_pretrained_checkpoint_instead_is_refused(tmp_path: Path) -> None:
    """Without a tracker in ``--load`` megatron-core falls back to ``--pretrained-checkpoint`` and reads its
    iter_<step>: a resume of ``--load``'s own iter_<step> would fine-tune from the base model without a word (or stop
    where the base lacks that step)."""
    step = random.randrange(1, 10**6)
    run, base = tmp_path / "run", tmp_path / "base"
    _save(run, "torch_dist", step)
    (run / "latest_checkpointed_iteration.txt").unlink()
    _save(base, "torch_dist", step)
    flags = {"ckpt_step": step, "pretrained_checkpoint": str(base)}
    with pytest.raises(ValueError, match=rf"--load {run} holds iter_{step:07d} but no latest_checkpointed_iteration"
                                         rf".txt, so megatron-core loads --pretrained-checkpoint {base} in its place"):
        check_load_directory(_run(run, **flags))
    check_load_directory(_run(tmp_path / "fresh", **flags))  # a fine-tuning run's first job at the base's step
    with pytest.raises(ValueError, match=rf"--ckpt-step {step + 1}: megatron-core reads {base}/iter_{step + 1:07d} "
                                         rf"for --pretrained-checkpoint {base}, which does not exist"):
        check_load_directory(_run(tmp_path / "fresh", ckpt_step=step + 1, pretrained_checkpoint=str(base)))
    (run / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    check_load_directory(_run(run, **flags))  # with its tracker --load is what megatron resumes


def test_a_directory_holding_both_torch_dist_and_rank_files_is_torch_dist(tmp_path: Path) -> None:
    """megatron-core's ``_get_checkpoint_format`` asks for ``metadata.json`` before the ``mp_rank_0*`` rank
    directories: an iteration directory holding both (rank files copied beside a re-saved torch_dist checkpoint) is
    read as torch_dist, its common state the one checked."""
    from megatron.training.checkpointing import _get_checkpoint_format

    iteration = random.randrange(1, 10**6)
    directory = _save(tmp_path, "torch_dist", iteration)
    (directory / "mp_rank_00").mkdir()
    torch.save({"args": argparse.Namespace(tensor_model_parallel_size=2), "iteration": iteration + 1},
               directory / "mp_rank_00" / "model_optim_rng.pt")
    checkpoint = read_stored_checkpoint(tmp_path)
    assert checkpoint is not None
    assert checkpoint.ckpt_format == _get_checkpoint_format(str(directory), _run(tmp_path)) == "torch_dist"
    assert checkpoint.common["iteration"] == iteration


def test_a_tracker_in_a_folder_that_cannot_be_listed_names_no_iteration_to_write(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder whose entries cannot be listed (no read permission; root reads any, so the listing is made to fail)
    shows no iteration to write into the tracker: the refusal says so and names the other fix."""
    named = random.randrange(1, 10**6)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{named}\n")
    glob = Path.glob

    def unlistable(self: Path, pattern: str, **kwargs):
        if self == tmp_path:
            raise PermissionError(13, "Permission denied", str(self))
        return glob(self, pattern, **kwargs)

    monkeypatch.setattr(Path, "glob", unlistable)
    run = argparse.Namespace(load=str(tmp_path), pretrained_checkpoint=None, ckpt_step=None)
    with pytest.raises(ValueError, match=rf"; {tmp_path} cannot be listed \(Permission denied\): restore that "
                                         rf"directory, or name the folder that holds the run's checkpoints with --load$"):
        check_load_directory(run)
