"""A ``--load`` megatron-core 0.19.2 loads nothing from: it prints "could not find the metadata file ... will start
from random" only after building the model, and trains from random weights. The entry refuses, before Megatron
initialises, a Hugging Face model folder (naming its conversion), a ``--load`` that does not exist and is not the
run's ``--save`` (a typo: nothing will ever be there), and one that holds no checkpoint megatron finds; the first
job of a run (``--load`` is ``--save``, missing or empty), a fine-tuning run's empty ``--load`` beside
``--pretrained-checkpoint``, and every layout megatron loads go on."""

from __future__ import annotations

import json
import os
import random
import types
from pathlib import Path

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import TRACKER_FILE, check_load_directory
from tests.unit_tests.training.checkpoint_helpers import save_dist_checkpoint, stored_args
from tests.unit_tests.training.entry_helpers import TINY_MOE_RUN, Reached, entry_up_to_pretrain, refused_line

TP1 = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
       "expert_tensor_parallel_size": 1, "data_parallel_size": 1}
"""The layout of a one-process run of the tiny card."""


def _megatron_loads_nothing(load: Path, **flags) -> bool:
    """Whether megatron-core's ``_load_base_checkpoint`` loads nothing from ``load`` (its "start from random")."""
    from megatron.training import checkpointing

    args = types.SimpleNamespace(**{"non_persistent_ckpt_type": None, "exit_on_missing_checkpoint": False,
                                    "ckpt_step": None, "non_persistent_global_ckpt_dir": None, **flags})
    return checkpointing._load_base_checkpoint(str(load), args, rank0=True)[0] is None


def _hugging_face_model(folder: Path) -> Path:
    """A Hugging Face model folder as ``huggingface-cli download`` leaves it: config, tokenizer, safetensors."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": random.choice([64, 128, 256])}))
    (folder / "tokenizer.json").write_text("{}")
    shards = random.randint(1, 3)
    for shard in range(1, shards + 1):
        (folder / f"model-{shard:05d}-of-{shards:05d}.safetensors").write_bytes(random.randbytes(64))
    return folder


def _run(*flags: str) -> list[str]:
    return [*TINY_MOE_RUN, *flags]


def test_a_hugging_face_folder_as_load_is_refused_naming_the_conversion(tmp_path, monkeypatch, capsys):
    hf = _hugging_face_model(tmp_path / f"Qwen3-{random.randint(0, 999)}")
    assert _megatron_loads_nothing(hf)
    entry = entry_up_to_pretrain(monkeypatch)
    for save in ([], ["--save", str(hf), "--save-interval", "5"]):  # also where --save is the same folder
        line = refused_line(entry, capsys, _run("--load", str(hf), *save))
        assert f"error: --load {hf} is a Hugging Face model folder (config.json and *.safetensors)" in line
        assert "trains from random weights" in line
        assert f"`oellm convert hf-to-mcore --model qwen3-30b-a3b-tiny --hf {hf} --out DIR` and pass --load DIR" in line
    line = refused_line(entry, capsys, _run("--pretrained-checkpoint", str(hf)))
    assert f"error: --pretrained-checkpoint {hf} is a Hugging Face model folder" in line
    assert "and pass --pretrained-checkpoint DIR" in line


def test_a_load_that_does_not_exist_and_is_not_save_is_refused(tmp_path, monkeypatch, capsys):
    """A typo: megatron loads nothing, and this run never saves there, so every job starts from random weights."""
    save = tmp_path / f"run-{random.randint(0, 999)}"
    typo = tmp_path / f"nur-{random.randint(0, 999)}"
    assert _megatron_loads_nothing(typo)
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, _run("--load", str(typo), "--save", str(save), "--save-interval", "5"))
    assert f"error: --load {typo} does not exist and is not the run's --save {save}: " in line
    assert line.endswith(f"drop --load to start from scratch, or give --load {save}, the run's --save folder, to "
                         "resume from its checkpoints")
    line = refused_line(entry, capsys, _run("--load", str(typo)))
    assert f"--load {typo} does not exist and is not a --save folder (the run has none)" in line
    assert not typo.exists() and not save.exists()


@pytest.mark.parametrize("contents", ["files", "empty", "iterations", "release"])
def test_a_load_holding_no_checkpoint_megatron_finds_is_refused(contents, tmp_path, monkeypatch, capsys):
    """Logs, an empty folder, or checkpoint directories whose tracker is gone: megatron starts from random."""
    load = tmp_path / "elsewhere"
    load.mkdir()
    names = [f"log-{i}.txt" for i in range(random.randint(1, 5))]
    fix = "drop --load to start from scratch"
    if contents == "files":
        for name in names:
            (load / name).write_text(f"{random.random()}\n")
        holds = f"holds no checkpoint (no {TRACKER_FILE}, no iter_* directory; it holds {names[0]}"
    elif contents == "empty":
        holds = "is empty"
    elif contents == "iterations":
        steps = sorted(random.sample(range(1, 10**5), 2))
        for step in steps:
            save_dist_checkpoint(load, stored_args(**TP1), iteration=step)
        (load / TRACKER_FILE).unlink()
        holds = f"holds iter_{steps[0]:07d}, iter_{steps[1]:07d} but no {TRACKER_FILE}"
        fix = f"to resume iteration {steps[1]}, add --ckpt-step {steps[1]} or write it into {load / TRACKER_FILE}"
    else:
        save_dist_checkpoint(load, stored_args(**TP1), iteration=0)
        (load / TRACKER_FILE).unlink()
        holds = f"holds release but no {TRACKER_FILE}"
        fix = f"to load {load / 'release'}, write release into {load / TRACKER_FILE}"
    assert _megatron_loads_nothing(load)
    save = tmp_path / "run"
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys,
                        _run("--load", str(load), "--save", str(save), "--save-interval", "5"))
    assert f"error: --load {load} {holds}" in line and f"is not the run's --save {save}: " in line
    assert "trains from random weights" in line and fix in line


@pytest.mark.parametrize("state", ["missing", "empty", "files"])
def test_the_first_job_of_a_run_goes_on(state, tmp_path, monkeypatch):
    """--load is --save (spelled the same or not): nothing to load yet, or logs of a job that stopped before its
    first save."""
    run = tmp_path / f"run-{random.randint(0, 999)}"
    if state != "missing":
        run.mkdir()
    if state == "files":
        (run / "progress.txt").write_text(f"job {random.randint(1, 9)}\n")
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for load in (str(run), f"{run}/", os.path.join("..", tmp_path.name, run.name)):
        with pytest.raises(Reached):
            entry.main(_run("--load", load, "--save", str(run), "--save-interval", "5"))


def test_a_fine_tuning_runs_first_job_goes_on(tmp_path, monkeypatch):
    """--pretrained-checkpoint beside an empty or missing --load: megatron fine-tunes from the pretrained one."""
    pretrained = save_dist_checkpoint(tmp_path / "base", stored_args(**TP1), iteration=random.randrange(1, 10**5))
    for load in (tmp_path / "missing", tmp_path / "empty"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        check_load_directory(parse_oellm_argv(["--load", str(load), "--pretrained-checkpoint", str(pretrained)]))


def test_layouts_megatron_loads_are_not_refused(tmp_path):
    """A tracker (iteration or release), --ckpt-step without a tracker, and a global non-persistent checkpoint newer
    than any persistent one: megatron loads each, so --load is not --save there and still passes."""
    step = random.randrange(1, 10**5)
    tracked = save_dist_checkpoint(tmp_path / "tracked", stored_args(**TP1), iteration=step)
    release = save_dist_checkpoint(tmp_path / "release", stored_args(**TP1), iteration=0)
    untracked = save_dist_checkpoint(tmp_path / "untracked", stored_args(**TP1), iteration=step)
    (untracked / TRACKER_FILE).unlink()
    non_persistent = tmp_path / "np"
    save_dist_checkpoint(non_persistent / "non_persistent", stored_args(**TP1), iteration=step)
    for argv in (["--load", str(tracked)], ["--load", str(release)],
                 ["--load", str(untracked), "--ckpt-step", str(step)],
                 ["--load", str(non_persistent), "--non-persistent-ckpt-type", "global"],
                 ["--load", str(tmp_path / "local"), "--non-persistent-ckpt-type", "local"]):
        check_load_directory(parse_oellm_argv([*argv, "--save", str(tmp_path / "new")]))
    assert not _megatron_loads_nothing(untracked, ckpt_step=step)
    assert not _megatron_loads_nothing(non_persistent, non_persistent_ckpt_type="global")
