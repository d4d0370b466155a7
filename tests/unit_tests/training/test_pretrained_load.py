"""A fine-tuning run's first job: megatron-core 0.19.2's ``load_checkpoint`` loads ``--pretrained-checkpoint`` when
``--load`` is unset or holds no ``latest_checkpointed_iteration.txt`` (and sets ``--finetune``). The entry's checks
read that checkpoint, name the flag that gave it, and refuse a ``--pretrained-checkpoint`` megatron would not find
before Megatron initialises."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import (
    TRACKER_FILE,
    check_load_directory,
    load_source,
    read_loaded_checkpoint,
)
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, save_rank_files, stored_args
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

TP2 = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
       "expert_tensor_parallel_size": 1}
"""A saved layout a one-GPU run of the tiny card cannot load rank files of."""


def _megatron_loads(load: Path | None, pretrained: Path) -> Path:
    """The directory megatron-core's ``load_checkpoint`` takes for ``--load load --pretrained-checkpoint pretrained``
    (its own ``checkpoint_exists``)."""
    from megatron.training.checkpointing import checkpoint_exists

    return pretrained if not checkpoint_exists(str(load) if load else None) else load


@pytest.mark.parametrize("load_state", ["unset", "empty", "missing", "tracker"])
def test_the_source_is_megatrons(tmp_path: Path, load_state: str) -> None:
    """--pretrained-checkpoint stands in for an unset, empty or missing --load, never for one with a tracker; the
    checkpoint read from it is marked as fine-tuned and named by its flag."""
    pretrained = save_dist_checkpoint(tmp_path / "base", stored_args(**TP2), iteration=random.randrange(1, 10**5))
    load = None if load_state == "unset" else tmp_path / "run"
    if load_state == "empty":
        load.mkdir()
    elif load_state == "tracker":
        save_dist_checkpoint(load, stored_args(**TP2), iteration=random.randrange(1, 10**5))
    argv = ["--pretrained-checkpoint", str(pretrained), *(["--load", str(load)] if load else [])]
    args = parse_oellm_argv(argv)
    flag, directory = load_source(args)
    assert directory == _megatron_loads(load, pretrained)
    checkpoint = read_loaded_checkpoint(args)
    assert checkpoint is not None
    assert checkpoint.fine_tunes == (flag == "--pretrained-checkpoint") == (load_state != "tracker")
    assert checkpoint.named_by == f"{flag} {directory}" and checkpoint.directory.parent == directory
    assert load_source(parse_oellm_argv([])) is None


def test_a_pretrained_rank_file_checkpoint_of_another_layout_is_refused_naming_its_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--ckpt-format torch weights of another tensor-parallel size under --pretrained-checkpoint (an empty --load)
    are refused before Megatron initialises, naming --pretrained-checkpoint and its conversion; megatron would fail
    after allocating the model. With its own layout the run goes on."""
    entry = entry_up_to_pretrain(monkeypatch)
    iteration = random.randrange(1, 10**5)
    pretrained = save_rank_files(tmp_path / "base", stored_args(**TP2), iteration)
    run = tmp_path / "run"
    run.mkdir()
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--load", str(run),
            "--pretrained-checkpoint", str(pretrained), "--ckpt-format", "torch", "--mock-data", "--seq-length", "64"]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --pretrained-checkpoint {pretrained} (iter_{iteration:07d}) is a "
                           "--ckpt-format torch checkpoint")
    assert "then --pretrained-checkpoint DIR/torch_dist --ckpt-format torch_dist" in line
    with pytest.raises(Reached):
        entry.main([*argv, "--tensor-model-parallel-size", "2", "--sequence-parallel"])


def test_a_pretrained_checkpoint_loads_no_optimizer_state_so_its_layout_may_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dp_reshardable training checkpoint of another layout as --pretrained-checkpoint goes on: megatron sets
    --finetune for it and reads no optimizer state, so the resharding refusal of a --load resume does not apply."""
    entry = entry_up_to_pretrain(monkeypatch)
    pretrained = save_dist_checkpoint(tmp_path / "base", stored_args(**TP2), iteration=random.randrange(1, 10**5))
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--ckpt-format", "torch_dist",
            "--use-distributed-optimizer", "--mock-data", "--seq-length", "64"]
    with pytest.raises(Reached):
        entry.main([*argv, "--load", str(tmp_path / "run"), "--pretrained-checkpoint", str(pretrained)])
    assert entry.main([*argv, "--load", str(pretrained)]) == 2  # the same checkpoint resumed is refused


def test_a_pretrained_checkpoint_megatron_would_not_find_is_refused(tmp_path: Path) -> None:
    """Where --pretrained-checkpoint is what megatron loads, a directory without a tracker (a typo, an iteration
    directory) is refused naming the fix; megatron stops with FileNotFoundError after allocating the model. Beside
    a --load that holds a checkpoint it is never read, and not checked."""
    iteration = random.randrange(1, 10**5)
    pretrained = save_dist_checkpoint(tmp_path / "base", stored_args(**TP2), iteration=iteration)
    typo = tmp_path / "bsae"
    with pytest.raises(ValueError, match=f"--pretrained-checkpoint {typo} holds no {TRACKER_FILE}: megatron-core"):
        check_load_directory(parse_oellm_argv(["--pretrained-checkpoint", str(typo)]))
    run = tmp_path / "run"
    with pytest.raises(ValueError, match=f"--load {run} holds none either"):
        check_load_directory(parse_oellm_argv(["--pretrained-checkpoint", str(typo), "--load", str(run)]))
    step_dir = pretrained / f"iter_{iteration:07d}"
    # megatron applies --ckpt-step to --load too, and looks for the tracker before it falls back: no --ckpt-step fix
    with pytest.raises(ValueError, match=f"pass --pretrained-checkpoint {pretrained} with a {TRACKER_FILE} naming "
                                         f"{iteration}$"):
        check_load_directory(parse_oellm_argv(["--pretrained-checkpoint", str(step_dir)]))
    with pytest.raises(ValueError, match=f"--load {step_dir} is a checkpoint's iteration directory .* fine-tunes from "
                                         f"--pretrained-checkpoint instead, without a word; pass --load {pretrained} "
                                         f"with a {TRACKER_FILE} naming {iteration}$"):
        check_load_directory(parse_oellm_argv(["--pretrained-checkpoint", str(pretrained), "--load", str(step_dir)]))
    check_load_directory(parse_oellm_argv(["--pretrained-checkpoint", str(pretrained), "--load", str(run)]))
    check_load_directory(parse_oellm_argv(["--pretrained-checkpoint", str(typo), "--load", str(pretrained)]))


def test_a_load_checkpoint_found_only_by_ckpt_step_beside_a_pretrained_one_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--load holds iter_<step> but no tracker: megatron's --use-checkpoint-args would read --load's arguments (here
    those of another model) while its load falls back to --pretrained-checkpoint's iter_<step>; the entry refuses the
    fallback first, naming both ways to resume --load."""
    from megatron.oellm.cards import get_card

    entry = entry_up_to_pretrain(monkeypatch)
    pretrained = save_dist_checkpoint(tmp_path / "base", stored_args(**TP2), iteration=random.randrange(1, 10**5))
    step = random.randrange(1, 10**5)
    layers = get_card("qwen3-30b-a3b-tiny").num_layers + random.randrange(1, 4)
    run = save_dist_checkpoint(tmp_path / "run", stored_args(**TP2, num_layers=layers), iteration=step)
    (run / TRACKER_FILE).unlink()
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--ckpt-format", "torch_dist",
            "--pretrained-checkpoint", str(pretrained), "--load", str(run), "--use-checkpoint-args", "--mock-data",
            "--seq-length", "64"]
    assert entry.main([*argv, "--ckpt-step", str(step)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"--load {run} holds iter_{step:07d} but no {TRACKER_FILE}" in line
    assert "drop --pretrained-checkpoint or write" in line
    (run / TRACKER_FILE).write_text(f"{step}\n")  # with its tracker, --load's arguments of another model are refused
    assert entry.main([*argv, "--ckpt-step", str(step)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"from --load {run} that differ" in line and f"num_layers: checkpoint {layers}" in line
    (run / TRACKER_FILE).unlink()
    with pytest.raises(Reached):  # without --ckpt-step megatron reads no arguments from --load
        entry.main(argv)
