"""A dry run of every row notes each row's run directory ``--submit`` could not create, not only the first row's: the
one ``--dry-run`` prints, and the one ``--local`` prints where it cannot run (its rows not passed to the notes); rows
blocked by different paths get a note each (mutation audit of ``describe_recipe`` and ``run_dir_problems``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.slurm import run_dir

NOTE = "note: --submit will refuse this: "
CONFIG = EXAMPLES / "qwen3_30b_a3b_mn5.toml"
FIX = "pass --output-dir DIR (or set cluster.output_dir) to a directory you can write"


def _run_dirs(output: Path) -> list[Path]:
    """Every row's run directory under ``--output-dir output`` (the recipe's default output folder swapped for it)."""
    recipe = load_recipe(CONFIG)
    default = Path("oellm-runs").absolute()
    return [output / run_dir(recipe, number).relative_to(default) for number in range(1, len(recipe.rows) + 1)]


def _notes(capsys, output: Path, image: Path) -> list[str]:
    """The ``--submit will refuse`` notes of a dry run of every row into ``output``."""
    assert main(["recipe", str(CONFIG), "--image", str(image), "--output-dir", str(output), "--dry-run"]) == 0
    return [line.removeprefix(NOTE) for line in capsys.readouterr().out.splitlines() if line.startswith(NOTE)]


def _local_notes(capsys, output: Path, image: Path) -> list[str]:
    """The run-directory notes of the dry run ``--local`` prints, without a GPU, for the recipe run into ``output``
    (``image`` unused: ``--local`` runs no container)."""
    assert main(["recipe", str(CONFIG), "--local", "--output-dir", str(output)]) == 2
    out = capsys.readouterr().out
    assert "printing the dry run instead" in out
    return [line.removeprefix(NOTE) for line in out.splitlines()
            if line.startswith(NOTE + "cannot create the run directory")]


@pytest.mark.parametrize("notes_of", [_notes, _local_notes], ids=["dry-run", "local-without-gpu"])
def test_a_later_rows_blocked_run_dir_is_noted(tmp_path, monkeypatch, capsys, notes_of):
    """Row 2's run directory is a file: noted though row 1's can be made."""
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 0)
    monkeypatch.chdir(tmp_path)
    image = tmp_path / "image.sif"
    image.touch()
    output = tmp_path / f"runs{random.randrange(10**6)}"
    directories = _run_dirs(output)
    assert len(directories) >= 2
    directories[1].parent.mkdir(parents=True)
    directories[1].write_bytes(random.randbytes(8))
    assert notes_of(capsys, output, image) == [
        f"cannot create the run directory {str(directories[1])!r} ({directories[1]} is a file); {FIX}"]


def test_two_rows_blocked_differently_get_a_note_each(tmp_path, monkeypatch, capsys):
    """Row 1's run directory is a file, row 2's a loop of symbolic links: two notes, in row order."""
    monkeypatch.chdir(tmp_path)
    image = tmp_path / "image.sif"
    image.touch()
    output = tmp_path / f"runs{random.randrange(10**6)}"
    first, second = _run_dirs(output)[:2]
    first.parent.mkdir(parents=True)
    first.write_bytes(random.randbytes(8))
    second.symlink_to(second.name)
    notes = _notes(capsys, output, image)
    assert len(notes) == 2, notes
    assert notes[0] == f"cannot create the run directory {str(first)!r} ({first} is a file); {FIX}"
    assert notes[1].startswith(f"cannot create the run directory {str(second)!r} ({second} runs into a loop of "
                               "symbolic links")
