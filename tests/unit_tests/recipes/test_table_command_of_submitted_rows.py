"""``oellm recipe STRONG --submit --row 1`` printed the ``oellm table`` command of every row, with the report's
``--baseline-nodes 8``: on the one 4-node row it queued, that command failed ("no ok row on that many nodes"). A
submission prints the command of the rows it queued, and a dry run of the same rows prints the same command."""

from __future__ import annotations

import dataclasses
import random
import shlex

import pytest
from recipe_helpers import EXAMPLES, TABLE_COMMAND_PREFIX, fake_sbatch

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.slurm import run_dir
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

STRONG = EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"


def _printed_command(out: str) -> str:
    """The one table command line ``oellm recipe`` printed, without its lead-in."""
    (line,) = [line for line in out.splitlines() if line.startswith(TABLE_COMMAND_PREFIX)]
    return line.removeprefix(TABLE_COMMAND_PREFIX)


def _submit(tmp_path, monkeypatch, capsys, selection: list[str]) -> str:
    """The table command ``--submit`` of ``selection`` (``--row N`` / ``--nodes N``) prints last."""
    fake_sbatch(tmp_path, monkeypatch, f"Submitted batch job {random.randint(1, 10**6)}")
    image = tmp_path / "image.sif"
    image.touch()
    assert main(["recipe", str(STRONG), "--submit", *selection, "--output-dir", str(tmp_path / "runs"),
                 "--image", str(image)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith(TABLE_COMMAND_PREFIX)
    return _printed_command(out)


def _dry_run(tmp_path, capsys, selection: list[str]) -> str:
    """The table command ``--dry-run`` of ``selection`` prints."""
    assert main(["recipe", str(STRONG), "--dry-run", *selection, "--output-dir", str(tmp_path / "runs")]) == 0
    return _printed_command(capsys.readouterr().out)


def test_the_command_of_one_submitted_row_tables_its_log(tmp_path, monkeypatch, capsys):
    recipe = load_recipe(STRONG)
    number = random.choice([n for n, row in enumerate(recipe.rows, start=1) if row.nodes != 8])
    command = shlex.split(_submit(tmp_path, monkeypatch, capsys, ["--row", str(number)]))
    assert "--baseline-nodes" not in command
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, output_dir=str(tmp_path / "runs")))
    args = megatron_args(STRONG.stem, number, {"world_size": recipe.rows[number - 1].nodes * 4})
    step_ms = random.uniform(60000.0, 90000.0)  # the job log its queued row leaves in its run directory
    log = run_dir(recipe, number) / f"slurm-{random.randint(1, 10**6)}.out"
    log.write_text(megatron_log(args, [step_ms] * 10, [120.0] * 10))
    assert main(command[1:]) == 0, capsys.readouterr().err  # as printed: `oellm table ...`
    assert capsys.readouterr().out.count("slurm-") == 1


@pytest.mark.parametrize("selection", [["--row", "1"], ["--row", "2"], ["--nodes", "16"], []])
def test_a_dry_run_prints_the_command_its_submission_prints(tmp_path, monkeypatch, capsys, selection):
    submitted = _submit(tmp_path, monkeypatch, capsys, selection)
    assert _dry_run(tmp_path, capsys, selection) == submitted
    assert ("/row*/slurm-*.out" in submitted) == (selection == [])  # one pattern for all rows, else one per row
