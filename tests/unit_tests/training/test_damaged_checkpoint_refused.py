"""A checkpoint megatron would load that cannot be read (a data file lost, ``.metadata`` or a rank file cut short):
megatron-core stops on it after allocating the model on every rank, and the entry's checkpoint checks could not be
made. The entry refuses it first, naming the file; directories holding no checkpoint keep their own refusals."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import (
    converted_random_checkpoint,
    save_args_checkpoint,
    save_dist_checkpoint,
)
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

CARD = "qwen3-30b-a3b-tiny"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`CARD`'s fresh random HF weights converted to a megatron checkpoint (several ``.distcp`` files)."""
    return converted_random_checkpoint(CARD, tmp_path_factory.mktemp("converted"))


def _copy(converted: Path, tmp_path: Path) -> Path:
    """A copy of the converted checkpoint to damage."""
    return Path(shutil.copytree(converted, tmp_path / "load"))


def _argv(load: Path, fmt: str = "torch_dist") -> list[str]:
    """A fine-tuning mock-data run of :data:`CARD` loading ``load``."""
    return ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--ckpt-format", fmt, "--mock-data",
            "--seq-length", "64", "--load",
            str(load), "--finetune", "--dist-ckpt-strictness", "log_unexpected"]


def _data_files(iteration: Path) -> list[Path]:
    """The data files ``iteration``'s ``.metadata`` stores items in."""
    metadata = dcp.FileSystemReader(iteration).read_metadata()
    return sorted({iteration / info.relative_path for info in metadata.storage_data.values()})


def test_a_lost_data_file_is_named(converted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """One ``__0_<n>.distcp`` file of the torch_dist checkpoint deleted: refused naming it and the fix; the intact
    checkpoint goes on, and a tracker naming an empty iteration directory keeps its own refusal (megatron finds no
    checkpoint format there: not a damaged checkpoint)."""
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main(_argv(converted))
    load = _copy(converted, tmp_path)
    files = _data_files(load / "release")
    assert len(files) > 1
    lost = random.choice(files)
    lost.unlink()
    line = refused_line(entry, capsys, _argv(load))
    assert f"error: --load {load} leads megatron-core to a damaged torch_dist checkpoint" in line
    assert f"{lost} is missing" in line and "name an intact checkpoint" in line
    empty = tmp_path / "empty"
    iteration = random.randrange(1, 10**6)
    (empty / f"iter_{iteration:07d}").mkdir(parents=True)
    (empty / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    assert "which holds no checkpoint" in refused_line(entry, capsys, _argv(empty))


def test_a_truncated_metadata_file_is_named(converted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``.metadata`` cut to 100 bytes: refused naming it."""
    entry = entry_up_to_pretrain(monkeypatch)
    load = _copy(converted, tmp_path)
    metadata = load / "release" / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:100])
    line = refused_line(entry, capsys, _argv(load))
    assert f"cannot read {metadata}" in line


def _saved_as(fmt: str, target: Path) -> Path:
    """A checkpoint of ``--ckpt-format fmt`` of :data:`CARD`'s run with a random iteration and weights; its
    iteration directory."""
    return save_args_checkpoint(fmt, target, parse_oellm_argv(["--oellm-model", CARD]), random.randrange(1, 10**6))


def test_a_truncated_rank_file_is_named(tmp_path: Path) -> None:
    """A ``--ckpt-format torch`` rank file cut short: the read names it."""
    directory = _saved_as("torch", tmp_path)
    rank_file = directory / "mp_rank_00" / "model_optim_rng.pt"
    assert read_loaded_checkpoint(parse_oellm_argv(["--load", str(tmp_path), "--ckpt-format", "torch"])) is not None
    rank_file.write_bytes(rank_file.read_bytes()[:random.randrange(100, 400)])
    with pytest.raises(ValueError, match=rf"--load {tmp_path} leads megatron-core to a damaged torch checkpoint.*"
                                         rf"{rank_file} cannot be read"):
        read_loaded_checkpoint(parse_oellm_argv(["--load", str(tmp_path), "--ckpt-format", "torch"]))


def test_a_lost_torch_dcp_data_file_is_named(tmp_path: Path) -> None:
    """A ``torch_dcp`` checkpoint whose data file is gone: the read names it."""
    directory = _saved_as("torch_dcp", tmp_path)
    args = parse_oellm_argv(["--load", str(tmp_path), "--ckpt-format", "torch_dcp"])
    assert read_loaded_checkpoint(args) is not None
    lost = random.choice(_data_files(directory))
    lost.unlink()
    with pytest.raises(ValueError, match=rf"damaged torch_dcp checkpoint.*{lost} is missing"):
        read_loaded_checkpoint(args)


@pytest.mark.parametrize("fmt", ["torch_dist", "torch_dcp"])
def test_a_truncated_metadata_file_is_refused_as_a_damaged_checkpoint(fmt: str, tmp_path: Path) -> None:
    """``.metadata`` cut short is read once, before the state readers: its refusal still says which checkpoint it
    damages and what megatron-core would do with it, not the reader's bare error alone."""
    if fmt == "torch_dist":
        [directory] = save_dist_checkpoint(tmp_path, parse_oellm_argv(["--oellm-model", CARD])).glob("iter_*")
    else:
        directory = _saved_as(fmt, tmp_path)
    args = parse_oellm_argv(["--load", str(tmp_path), "--ckpt-format", fmt])
    metadata = directory / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:random.randrange(50, 150)])
    with pytest.raises(ValueError, match=rf"^--load {tmp_path} leads megatron-core to a damaged {fmt} checkpoint, "
                                         rf"which it would stop on after allocating the model on every rank: "
                                         rf"cannot read {metadata}"):
        read_loaded_checkpoint(args)
