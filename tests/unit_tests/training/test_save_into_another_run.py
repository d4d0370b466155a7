"""A ``--save`` folder that holds another run's checkpoints (its ``latest_checkpointed_iteration.txt`` and
iterations) while ``--load`` is not that folder: megatron-core 0.19.2 loads nothing from it and, from its first
save on, writes this run's iterations and tracker over the other run's. The entry refuses it naming the folder, its
latest iteration and the fixes; a run resuming its own folder (``--load`` is ``--save``) goes on."""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

import pytest

from megatron.oellm.training.run_schedule import check_save_directory
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, Reached, entry_up_to_pretrain, refused_line

TP1 = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
       "expert_tensor_parallel_size": 1, "data_parallel_size": 1}


def _another_run(folder: Path) -> int:
    """``folder`` holding a run's checkpoints at two iterations; returns the latest, which its tracker names."""
    steps = sorted(random.sample(range(1, 10**5), 2))
    for step in steps:
        save_dist_checkpoint(folder, stored_args(**TP1), iteration=step)
    return steps[-1]


def _save(folder: Path, *flags: str) -> list[str]:
    return [*TINY_MOE_RUN, "--save", str(folder), "--save-interval", str(random.randint(2, 9)), *flags]


@pytest.mark.parametrize("load", ["none", "pretrained", "another"])
def test_saving_into_another_runs_folder_is_refused(load, tmp_path, monkeypatch, capsys):
    other = tmp_path / f"other-{random.randint(0, 999)}"
    latest = _another_run(other)
    tracker = (other / "latest_checkpointed_iteration.txt").read_text()
    mine = tmp_path / "mine"  # a run branching off its own checkpoint into the other's folder
    _another_run(mine)
    flags = {"none": [], "pretrained": ["--pretrained-checkpoint", str(other)], "another": ["--load", str(mine)]}[load]
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, _save(other, *flags))
    assert f"error: --save {other} holds checkpoints this job does not load (latest iteration {latest}; " in line
    assert ("the run has no --load" if load != "another" else f"--load is {mine}") in line
    assert line.endswith(f"give a new --save folder, or --load {other} to resume from them")
    assert (other / "latest_checkpointed_iteration.txt").read_text() == tracker


def test_a_release_tracker_is_named(tmp_path):
    converted = save_dist_checkpoint(tmp_path / "converted", stored_args(**TP1), iteration=0)
    with pytest.raises(ValueError, match=f"^--save {converted} holds checkpoints this job does not load .tracker naming "
                                         "release; .* and the run has no --load"):
        check_save_directory(argparse.Namespace(save=str(converted), load=None))


def test_resuming_the_runs_own_folder_goes_on(tmp_path, monkeypatch):
    """--load is --save, however spelled (relative, trailing slash, a link), and a fresh or empty --save."""
    run = tmp_path / "run"
    _another_run(run)
    (tmp_path / "link").symlink_to(run)
    monkeypatch.chdir(tmp_path)
    for load in (str(run), f"{run}/", "run", str(tmp_path / "link"), os.path.join("..", tmp_path.name, "run")):
        check_save_directory(argparse.Namespace(save=str(run), load=load))
    (tmp_path / "empty").mkdir()
    for save in (tmp_path / "empty", tmp_path / "fresh"):
        with pytest.raises(Reached):
            entry_up_to_pretrain(monkeypatch).main(_save(save))
