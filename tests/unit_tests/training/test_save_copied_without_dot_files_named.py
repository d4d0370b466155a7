"""A finished save copied with a shell glob (``cp -r iter_X/* DST``) loses DCP's hidden ``.metadata`` but keeps
``metadata.json``: ``oellm convert`` says so and how to copy it, instead of calling it an unfinished save whose
``metadata.json`` is missing (it is there). (The entry's damaged-checkpoint check names the missing ``.metadata``.)"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.training.checkpoint_helpers import converted_random_checkpoint

CARD = "qwen3-30b-a3b-tiny"
LOST = ("holds metadata.json, which megatron-core writes when a save finishes, but not DCP's hidden .metadata, "
        "written just before it: a copy that skips dot files")


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """(run folder whose tracker names the iteration, that iteration), copied from a finished save without dot
    files, as a shell glob copies it."""
    folder = tmp_path_factory.mktemp("glob_copy")
    source = converted_random_checkpoint(CARD, folder) / "release"
    step = random.randrange(1, 10**6)
    target = folder / "run" / f"iter_{step:07d}"
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if not entry.name.startswith("."):
            (shutil.copytree if entry.is_dir() else shutil.copy)(entry, target / entry.name)
    assert (target / "metadata.json").is_file() and not (target / ".metadata").exists()
    (folder / "run" / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return folder / "run", step


def test_convert_says_the_copy_lost_the_dot_files(copied: tuple[Path, int], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    folder, step = copied
    capsys.readouterr()
    assert main(["convert", "mcore-to-hf", "--model", CARD, "--mcore", str(folder), "--out",
                 str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"iter_{step:07d} {LOST}" in error, error
    assert "unfinished" not in error and "rsync -a" in error, error
    assert not (tmp_path / "out").exists()
