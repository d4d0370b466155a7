"""``oellm table DIR`` for a folder suggested ``DIR/*.out``, which matches nothing in a recipe's folder: the recipes
write each job's log one level deeper, ``<recipe dir>/rowNN-Mn/slurm-ID.out``. The suggestion is now a pattern that
matches the logs the folder holds (in it, in its run directories, or one level deeper in the output folder), and a
folder without any says so. Fresh random row numbers, node counts and job ids."""

from __future__ import annotations

import dataclasses
import glob
import os
import random
import shlex
from pathlib import Path

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.slurm import run_dir
from tests.unit_tests.megatron_logs import EXAMPLES


def _folder_error(folder: Path, capsys) -> str:
    """The error ``oellm table FOLDER`` prints (exit status 2, nothing on stdout)."""
    assert main(["table", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


def _suggested(err: str, folder: Path) -> str:
    """The pattern the error suggests for ``folder``, checked to be the one the message names, as one shell word."""
    prefix = f"oellm table: error: log {str(folder)!r} is a folder; give its log files, e.g. "
    assert err.startswith(prefix), err
    words = shlex.split(err[len(prefix):].rstrip("\n"))
    assert len(words) == 1, err
    return words[0]


def _recipe_logs(output_dir: Path) -> list[Path]:
    """Job logs of random rows of the strong recipe under ``output_dir`` where its jobs write them (``run_dir``)."""
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, output_dir=str(output_dir)))
    logs = []
    for number in random.sample(range(1, len(recipe.rows) + 1), random.randint(1, 3)):
        logs.append(run_dir(recipe, number) / f"slurm-{random.randrange(10**5, 10**7)}.out")
        logs[-1].parent.mkdir(parents=True)
        logs[-1].write_text("")
    (logs[0].parent / "job.sbatch").write_text("#!/bin/bash\n")  # what else a run directory holds
    return logs


def test_a_recipe_folder_is_told_the_pattern_of_its_run_directories(tmp_path: Path, capsys) -> None:
    logs = _recipe_logs(tmp_path)
    recipe_folder = logs[0].parent.parent
    suggested = _suggested(_folder_error(recipe_folder, capsys), recipe_folder)
    assert suggested == str(recipe_folder / "*" / "slurm-*.out")
    assert sorted(glob.glob(suggested)) == sorted(map(str, logs))


def test_the_output_folder_is_told_the_pattern_one_level_deeper(tmp_path: Path, capsys) -> None:
    logs = _recipe_logs(tmp_path)
    suggested = _suggested(_folder_error(tmp_path, capsys), tmp_path)
    assert suggested == str(tmp_path / "*" / "*" / "slurm-*.out")
    assert sorted(glob.glob(suggested)) == sorted(map(str, logs))


def test_a_run_directory_or_a_folder_of_logs_keeps_its_own_pattern(tmp_path: Path, capsys) -> None:
    """Logs directly in the folder (a run directory, logs copied together) are given as ``FOLDER/*.out``, also where
    its subfolders hold recipe logs too."""
    logs = _recipe_logs(tmp_path)
    run_directory = logs[0].parent
    assert _suggested(_folder_error(run_directory, capsys), run_directory) == str(run_directory / "*.out")
    copied = tmp_path / f"copied{random.randrange(100)}"
    copied.mkdir()
    (copied / "a.out").write_text("")
    (copied / "row01-4n").mkdir()
    (copied / "row01-4n" / "slurm-1.out").write_text("")
    assert _suggested(_folder_error(copied, capsys), copied) == str(copied / "*.out")


def test_a_folder_without_a_log_says_so(tmp_path: Path, capsys) -> None:
    """Nothing to suggest: every pattern tried is named, none matches a file (a folder named like a log is none)."""
    folder = tmp_path / f"runs{random.randrange(100)}"
    (folder / "row01-4n" / "slurm-7.out").mkdir(parents=True)
    (folder / "notes.txt").write_text("")
    tried = ", ".join(os.path.join(folder, pattern) for pattern in ("*.out", "*/slurm-*.out", "*/*/slurm-*.out"))
    assert _folder_error(folder, capsys) == (
        f"oellm table: error: log {str(folder)!r} is a folder; none of {tried} matches a file in it; "
        "give the log files themselves\n")


def test_a_folder_name_with_pattern_characters_is_matched_as_written(tmp_path: Path, capsys) -> None:
    """``runs[1]`` is searched as that folder, not as the character class it spells."""
    folder = tmp_path / "runs[1]"
    (folder / "row02-8n").mkdir(parents=True)
    (folder / "row02-8n" / f"slurm-{random.randrange(10**6)}.out").write_text("")
    suggested = _suggested(_folder_error(folder, capsys), folder)
    assert suggested == os.path.join(glob.escape(str(folder)), "*", "slurm-*.out")
    assert glob.glob(suggested) == [str(log) for log in (folder / "row02-8n").iterdir()]


def test_a_folder_name_with_a_space_is_suggested_as_one_word(tmp_path: Path, capsys) -> None:
    """``my logs``: the suggestion pasted into a shell is one argument, which matches the folder's logs."""
    folder = tmp_path / f"my logs {random.randrange(100)}"
    folder.mkdir()
    log = folder / f"slurm-{random.randrange(10**6)}.out"
    log.write_text("")
    suggested = _suggested(_folder_error(folder, capsys), folder)
    assert glob.glob(suggested) == [str(log)]
