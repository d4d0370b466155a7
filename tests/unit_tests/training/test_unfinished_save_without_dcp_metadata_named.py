"""A save stopped before megatron-core's finalize step wrote ``.metadata`` (just before ``metadata.json``) leaves
``__*_*.distcp`` files only: the entry and ``oellm convert`` name it as an unfinished save, with the finished save the
run's tracker names; they called it "no checkpoint" / "not a megatron-core distributed checkpoint"."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import check_load_directory, read_loaded_checkpoint
from tests.unit_tests.training.checkpoint_helpers import run_with_unfinished_save

CARD = "qwen3-30b-a3b-tiny"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """(run folder, finished iteration its tracker names, a later iteration stopped before its .metadata)."""
    folder, finished, unfinished = run_with_unfinished_save(
        CARD, tmp_path_factory.mktemp("unfinished"), ("metadata.json", ".metadata", "common.pt"))
    assert list((folder / f"iter_{unfinished:07d}").glob("__*_*.distcp"))
    return folder, finished, unfinished


@pytest.mark.parametrize("flag", ["--load", "--pretrained-checkpoint"])
def test_the_entry_names_the_unfinished_save(run: tuple[Path, int, int], flag: str) -> None:
    folder, finished, unfinished = run
    args = parse_oellm_argv(["--oellm-model", CARD, "--ckpt-format", "torch_dist", flag, str(folder),
                             "--ckpt-step", str(unfinished)])
    for check in (read_loaded_checkpoint, check_load_directory):
        with pytest.raises(ValueError) as raised:
            check(args)
        message = str(raised.value)
        assert f"{folder / f'iter_{unfinished:07d}'} is an unfinished save" in message, message
        assert f"names iter_{finished:07d}, the run's last finished save" in message, message


def test_convert_names_the_unfinished_save(run: tuple[Path, int, int], tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    folder, finished, unfinished = run
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", CARD, "--mcore", str(folder / f"iter_{unfinished:07d}"),
                 "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"iter_{unfinished:07d} is an unfinished save" in error, error
    assert f"names iter_{finished:07d}, the run's last finished save: pass --mcore {folder}" in error, error
    assert not (tmp_path / "out").exists()


def test_an_iteration_with_only_its_common_state_is_unfinished_and_an_empty_one_holds_none(
        run: tuple[Path, int, int]) -> None:
    """Stopped before any data file (only ``common.pt`` written): unfinished too; an empty iteration directory keeps
    megatron's "holds no checkpoint"."""
    folder, finished, _ = run
    step = finished + random.randrange(1000, 2000)
    directory = folder / f"iter_{step:07d}"
    directory.mkdir()
    args = parse_oellm_argv(["--oellm-model", CARD, "--load", str(folder), "--ckpt-step", str(step)])
    with pytest.raises(ValueError, match="which holds no checkpoint"):
        check_load_directory(args)
    (directory / "common.pt").write_bytes(random.randbytes(random.randrange(1, 100)))
    with pytest.raises(ValueError, match=f"iter_{step:07d} is an unfinished save"):
        check_load_directory(args)
    shutil.rmtree(directory)
