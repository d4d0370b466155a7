"""``oellm recipe`` prints the ``oellm table`` command of its jobs' logs, with the report's efficiency baseline
(``table_baseline_nodes``): the strong-scaling table's efficiency column is relative to its 8-node row, while
``oellm table`` on its own takes the smallest run (4 nodes) and printed "Efficiency vs 4 nodes"."""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import os
import random
import shlex
from pathlib import Path

from recipe_helpers import EXAMPLES, TABLE_COMMAND_PREFIX, fake_sbatch

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.slurm import run_dir
from tests.unit_tests.megatron_logs import megatron_args, megatron_log

STRONG = EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"


def _table_command(out: str) -> list[str]:
    (line,) = [line for line in out.splitlines() if line.startswith(TABLE_COMMAND_PREFIX)]
    return shlex.split(line.removeprefix(TABLE_COMMAND_PREFIX))


def test_the_command_reads_every_rows_log_against_the_reports_baseline(tmp_path, capsys):
    assert main(["recipe", str(STRONG), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    command = _table_command(capsys.readouterr().out)
    assert command[:2] == ["oellm", "table"]
    assert command[3:] == ["--gpus-per-node", "4", "--baseline-nodes", "8", "--gpu", "h100-sxm"]
    recipe = load_recipe(STRONG)
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, output_dir=str(tmp_path)))
    for number in range(1, len(recipe.rows) + 1):
        log = run_dir(recipe, number) / f"slurm-{random.randrange(10**6)}.out"  # where each row's job writes it
        assert fnmatch.fnmatch(str(log), command[2])


def test_the_printed_command_gives_the_reports_efficiency_column(tmp_path, capsys):
    """Logs of rows 1 and 2 (4 and 8 nodes) where the printed command looks: efficiency against the 8-node row."""
    assert main(["recipe", str(STRONG), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    command = _table_command(capsys.readouterr().out)
    folder = Path(command[2].removesuffix("/row*/slurm-*.out"))
    tokens = {4: random.uniform(5000, 7000), 8: random.uniform(5000, 7000)}
    for row, nodes in ((1, 4), (2, 8)):
        args = megatron_args("qwen3_5_35b_a3b_mn5_strong", row, {"world_size": nodes * 4})
        step_ms = 4096 * 4096 / tokens[nodes] / (nodes * 4) * 1000
        directory = folder / f"row{row:02d}-{nodes}n"
        directory.mkdir(parents=True)
        (directory / "slurm-1.out").write_text(megatron_log(args, [step_ms] * 10, [120.0] * 10))
    logs = sorted(glob.glob(command[2]))
    assert len(logs) == 2
    assert main(["table", *logs, *command[3:]]) == 0  # the printed options, as printed
    table = capsys.readouterr().out
    assert "Efficiency vs 8 nodes" in table


def test_a_baseline_no_row_runs_on_is_refused(tmp_path, capsys):
    nodes = random.choice([3, 5, 12, 256])
    config = tmp_path / "strong_other.toml"
    config.write_text(f'extends = "{STRONG}"\ntable_baseline_nodes = {nodes}\n')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"table_baseline_nodes = {nodes} names no row (the rows run on [4, 8, 16, 32, 64, 128] nodes)" in err
    assert "or to 0 for the table's default" in err


def test_a_submission_ends_with_the_command(tmp_path, monkeypatch, capsys):
    fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 9")
    image = tmp_path / "image.sif"
    image.touch()
    assert main(["recipe", str(STRONG), "--submit", "--row", "2", "--output-dir", str(tmp_path / "runs"),
                 "--image", str(image)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(TABLE_COMMAND_PREFIX) and last.endswith(" --baseline-nodes 8 --gpu h100-sxm")
    assert str(tmp_path / "runs") in last


def test_the_command_counts_nodes_with_the_clusters_gpus_and_a_zero_baseline_is_the_tables_default(tmp_path, capsys):
    """``oellm table`` counts nodes as GPUs / 4 unless told: on a cluster of 8 GPUs per node the printed command's
    node counts (and its baseline) were twice the runs'. A recipe extending one with a baseline clears it with 0."""
    config = tmp_path / "eight.toml"
    config.write_text(f'extends = "{STRONG}"\ntable_baseline_nodes = 0\n[cluster]\ngpus_per_node = 8\n')
    assert main(["recipe", str(config), "--dry-run", "--row", "2"]) == 0
    command = _table_command(capsys.readouterr().out)
    assert command[3:] == ["--gpus-per-node", "8", "--gpu", "h100-sxm"]


ROUTING = EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml"


def test_a_row_the_report_read_over_other_iterations_gets_a_command_of_its_own(tmp_path, capsys):
    """The routing table's row 2 is the report's mean over iterations 11-40; one command for all rows read it as the
    median of 3-10, which the notes alone warned about. Each window gets its own command, whose globs match exactly
    its rows' logs."""
    assert main(["recipe", str(ROUTING), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("tables of the jobs' logs once they have run:")
    default, row_2 = out[start + 1], out[start + 2]
    assert default.startswith("  rows 1, 3, 4, 5 (median of iterations 3-10): oellm table ")
    assert row_2.startswith("  row 2 (mean of iterations 11-40): oellm table ")
    recipe = load_recipe(ROUTING)
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, output_dir=str(tmp_path)))
    for line, numbers, options in ((default, [1, 3, 4, 5], []), (row_2, [2], ["--window", "11-40", "--statistic",
                                                                                 "mean"])):
        command = shlex.split(line.split(": ", 1)[1])
        logs = [word for word in command[2:] if word.endswith(".out")]
        assert command[2 + len(logs):] == ["--gpus-per-node", "4", "--gpu", "h100-sxm", *options]
        for number in range(1, len(recipe.rows) + 1):
            log = str(run_dir(recipe, number) / f"slurm-{random.randrange(10**6)}.out")
            assert any(fnmatch.fnmatch(log, pattern) for pattern in logs) is (number in numbers), (number, logs)


def test_a_bad_table_window_is_refused_naming_the_row(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(f'extends = "{ROUTING}"\nname = "bad"\n[[rows]]\nnodes = 8\nglobal_batch_size = 4096\n'
                      'micro_batch_size = 4\ntable_window = "40-11"\n')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert ("recipe bad row 1: table_window / table_statistic: --window '40-11': need 1 <= FIRST <= LAST"
            in capsys.readouterr().err)


def test_the_jupiter_command_names_its_gpu_and_the_table_footnotes_the_power_cap(tmp_path, capsys):
    """Jupiter's GH200s run capped at 680 W: its MFU against the nominal peak reads as comparable with MN5's unless
    the table says so. The recipe's command passes its cluster's GPU, and the table's footnote gives that GPU's note."""
    jupiter = EXAMPLES / "qwen3_235b_a22b_jupiter.toml"
    assert main(["recipe", str(jupiter), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    command = _table_command(capsys.readouterr().out)
    assert command[-2:] == ["--gpu", "gh200"]
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "slurm-1.out"
    log.write_text(megatron_log(args, [75200.0] * 10, [133.2] * 10))
    assert main(["table", str(log), "--gpu", "gh200"]) == 0
    assert "MFU = TFLOP/s/GPU / 989 (Jupiter runs GH200 power-capped at 680 W" in capsys.readouterr().out
    assert main(["table", str(log), "--gpu", "h100-sxm"]) == 0
    assert "MFU = TFLOP/s/GPU / 989. Efficiency" in capsys.readouterr().out  # every row has its MFU: no n/a


def test_a_cluster_gpu_without_a_peak_is_refused(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(f'extends = "{STRONG}"\nname = "bad"\n[cluster]\ngpu = "h100-sxm5"\n')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert "recipe bad: cluster.gpu must be one of a100, gh200, h100-nvl" in capsys.readouterr().err


def _write_row_logs(config: Path, output_dir: Path, numbers: tuple[int, ...], name: str):
    """The recipe of ``config`` writing into ``output_dir``, with a job log ``name`` of each row of ``numbers`` in its
    run directory, as the rows' jobs would leave them; the others' jobs have not run."""
    recipe = load_recipe(config)
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, output_dir=str(output_dir)))
    for number in numbers:
        args = megatron_args(config.stem, number, {"world_size": recipe.rows[number - 1].nodes * 4})
        run_dir(recipe, number).mkdir(parents=True)
        (run_dir(recipe, number) / name).write_text(megatron_log(args, [80000.0] * 10, [120.0] * 10))
    return recipe


def test_a_printed_command_reads_the_rows_that_have_run_and_names_the_others(tmp_path, capsys):
    """The routing recipe's per-window command names one pattern per row; a shell passes a pattern that matches
    nothing as typed (rows 4 and 5 still queued), and the table refused it all as "does not exist". The rows that
    ran are tabled, each pattern that matched nothing is named on stderr; a quoted pattern is expanded as the shell
    would have; with no log at all the table is refused."""
    assert main(["recipe", str(ROUTING), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    line = out[out.index("tables of the jobs' logs once they have run:") + 1]
    command = shlex.split(line.split(": ", 1)[1])
    patterns = [word for word in command[2:] if word.endswith(".out")]
    _write_row_logs(ROUTING, tmp_path, (1, 3), "slurm-7.out")
    shell_words = [match for pattern in patterns for match in (sorted(glob.glob(pattern)) or [pattern])]
    assert main(["table", *shell_words, *command[2 + len(patterns):]]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("slurm-7.out") == 2
    assert [line for line in captured.err.splitlines() if line.startswith("note: no log matches")] == [
        f"note: no log matches {pattern!r} (relative to {Path.cwd()}): left out (a row whose job has not run yet?)"
        for pattern in patterns[2:]]
    assert main(["table", patterns[0], "--gpus-per-node", "4"]) == 0  # quoted: expanded here
    assert capsys.readouterr().out.count("slurm-7.out") == 1
    assert main(["table", patterns[2], patterns[3]]) == 2
    assert "no log to read:" in capsys.readouterr().err


def test_the_baseline_goes_only_to_the_commands_whose_rows_run_on_its_nodes(tmp_path, capsys):
    """A recipe's baseline of 16 nodes given to row 2's command (8 nodes only) made that table refuse it."""
    config = tmp_path / "routing_16.toml"
    config.write_text(f'extends = "{ROUTING}"\nname = "routing_16"\ntable_baseline_nodes = 16\n')
    assert main(["recipe", str(config), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("tables of the jobs' logs once they have run:")
    assert "--baseline-nodes 16" in out[start + 1] and "--baseline-nodes" not in out[start + 2]


def test_a_baseline_row_still_queued_or_failed_leaves_the_default_baseline_with_a_note(tmp_path, capsys):
    """The strong recipe's command names --baseline-nodes 8; with the 8-node job still queued (its pattern matches
    nothing) or failed, the table refused everything. It now prints the rest against the default baseline and says
    so; a node count no row could have (every row ok, none missing) is still refused as a mistake."""
    assert main(["recipe", str(STRONG), "--dry-run", "--output-dir", str(tmp_path)]) == 0
    command = _table_command(capsys.readouterr().out)
    recipe = _write_row_logs(STRONG, tmp_path, (1, 3), "slurm-5.out")
    by_row = [str(run_dir(recipe, number)) + "/slurm-*.out" for number in (1, 2, 3)]  # row 2 still queued
    assert main(["table", *by_row, *command[3:]]) == 0
    captured = capsys.readouterr()
    assert "Efficiency vs 4 nodes" in captured.out
    assert "note: --baseline-nodes 8: no row on that many nodes has numbers" in captured.err
    assert main(["table", *by_row[::2], *command[3:]]) == 2  # both rows there and ok: 8 is a mistake
    assert "--baseline-nodes 8: no ok row on that many nodes" in capsys.readouterr().err


def test_a_log_named_twice_is_one_row(tmp_path, capsys):
    """A quoted pattern beside an explicit path (or a relative and an absolute spelling) named one log twice: two
    rows and a note about a second run that does not exist."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 1, {"world_size": 16})
    log = tmp_path / "row01-4n" / "slurm-3.out"
    log.parent.mkdir()
    log.write_text(megatron_log(args, [160000.0] * 10, [120.0] * 10))
    assert main(["table", str(tmp_path / "row*" / "slurm-*.out"), str(log),
                 os.path.relpath(log), "--gpus-per-node", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("slurm-3.out") == 1 and captured.err == ""
