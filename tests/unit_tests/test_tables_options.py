"""``oellm table``'s options and plot: an option that would be ignored is refused at once, naming the fix; the plot
shows every row."""

from __future__ import annotations

import csv
import io
import os
import random
import shlex

import pytest

from megatron.oellm.cli import main
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times, resized, rows_with_tokens


def test_a_title_without_a_plot_is_refused(tmp_path, capsys):
    """``--title`` without ``--plot`` was dropped without a word (no plot, no title)."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "8n.log"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    assert main(["table", str(log), "--title", "strong scaling"]) == 2
    captured = capsys.readouterr()
    assert "--title is the plot's title: give --plot PNG too" in captured.err and captured.out == ""
    assert main(["table", str(tmp_path / "missing.log"), "--title", "x"]) == 2  # refused before any log is read
    assert "--title" in capsys.readouterr().err
    assert main(["table", str(log)]) == 0


def test_the_plot_shows_efficiencies_above_110_percent(tmp_path, monkeypatch):
    """Against a slow baseline the other rows reach more than 110%: the efficiency axis stopped at 110% and drew
    them outside the picture."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from megatron.oellm.scaling_table import plot, with_efficiency

    tokens = {4: random.uniform(6000, 7000), 8: random.uniform(6000, 7000), 16: random.uniform(3000, 3900)}
    rows, _ = with_efficiency(rows_with_tokens(tokens), baseline_nodes=16)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot(rows, str(tmp_path / "scaling.png"))
    (figure,) = figures
    efficiency = figure.axes[1]
    highest = 100 * max(tokens.values()) / tokens[16]
    assert highest > 150 and efficiency.get_ylim()[1] > highest
    assert max(efficiency.lines[0].get_ydata()) == pytest.approx(highest, rel=1e-4)


@pytest.mark.parametrize("garbled", [7, 3.5, ["qwen3.5-35b-a3b"]])
def test_a_non_text_oellm_model_reads_as_an_unknown_model(garbled):
    """A garbled arguments block can print ``oellm_model`` as a number or list: the row reads "unknown model" and
    keeps Megatron's own numbers, instead of a TypeError ending the whole table."""
    from megatron.oellm.run_log import parse_log_text
    from megatron.oellm.scaling_table import Window, summarise

    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "oellm_model": garbled})
    tflops = round(random.uniform(100.0, 140.0), 1)  # as megatron prints it
    row = summarise(parse_log_text(megatron_log(args, random_times(10, 75000.0), [tflops] * 10)), Window(), 4)
    assert row.ok and row.model == "unknown model" and row.tflops_per_gpu is None
    assert row.tflops_per_gpu_logged == pytest.approx(tflops)


@pytest.mark.parametrize("name", ["scaling", "slurm-1234.out", "", "plots"])
def test_a_plot_path_matplotlib_would_not_write_as_named_is_refused(tmp_path, capsys, name):
    """``--plot scaling`` wrote ``scaling.png`` (matplotlib appends the default format's extension, so an existing
    ``scaling.png`` the user never named was replaced) and ``--plot plots`` next to a ``plots/`` folder wrote
    ``plots.png``, both with exit status 0; ``--plot slurm-1234.out`` (the input log's name) ended in matplotlib's
    ValueError traceback; ``--plot ''`` was ignored. Each is now one ``error:`` line before any log is read, nothing
    written."""
    pytest.importorskip("matplotlib")
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "slurm-1234.out"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    (tmp_path / "plots").mkdir()
    kept = tmp_path / "scaling.png"
    kept.write_bytes(random.randbytes(64))
    before = {path: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    target = str(tmp_path / name) if name else ""
    assert main(["table", str(log), "--plot", target]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "oellm table: error: --plot" in captured.err
    assert {path: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()} == before
    assert main(["table", str(log), "--plot", str(tmp_path / "strong.png")]) == 0  # a named image is written
    assert (tmp_path / "strong.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_option_of_the_command_reaches_the_table_cells(tmp_path, capsys):
    """``oellm table`` with each numeric option away from its default: the CSV cells are the hand computation from
    the logs' iteration times. Window 4-9 with ``--statistic mean``: the step time is the mean of iterations 4..9;
    tokens/s/GPU = GBS x sequence / step time / GPUs; ``--gpus-per-node 8`` makes 8 and 24 GPUs 1 and 3 nodes;
    ``--baseline-nodes 3`` (not the fewest nodes) makes the 24-GPU run the efficiency baseline; ``--peak-tflops`` is
    the MFU denominator of every row. The options are otherwise only tested on the functions the command calls."""
    base = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2)
    gbs, seq = base["global_batch_size"], base["seq_length"]
    times = {gpus: random_times(10, random.uniform(60_000.0, 90_000.0) * 32 / gpus) for gpus in (8, 24)}
    paths = []
    for gpus, ms in times.items():
        paths.append(tmp_path / f"{gpus}gpus.log")
        paths[-1].write_text(megatron_log(resized(base, gpus), ms, [round(random.uniform(90, 140), 1)] * 10))
    peak = round(random.uniform(300.0, 2000.0), 1)
    assert main(["table", *map(str, paths), "--format", "csv", "--window", "4-9", "--statistic", "mean",
                 "--gpus-per-node", "8", "--baseline-nodes", "3", "--peak-tflops", str(peak)]) == 0
    rows = {int(row["gpus"]): row for row in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    tokens = {}
    for gpus, ms in times.items():
        row = rows[gpus]
        step_s = sum(ms[3:9]) / 6 / 1000
        tokens[gpus] = gbs * seq / step_s / gpus
        assert float(row["nodes"]) == gpus / 8
        assert float(row["step_time_s"]) == pytest.approx(step_s, rel=1e-9)
        assert float(row["tokens_per_s_per_gpu"]) == pytest.approx(tokens[gpus], rel=1e-9)
        assert float(row["mfu_fraction"]) == pytest.approx(float(row["tflops_per_gpu"]) / peak, rel=1e-9)
    assert float(rows[24]["efficiency_fraction"]) == 1.0
    assert float(rows[8]["efficiency_fraction"]) == pytest.approx(tokens[8] / tokens[24], rel=1e-9)
    assert main(["table", *map(str, paths), "--peak-tflops", str(peak)]) == 0  # the markdown names the peak used
    assert f"MFU = TFLOP/s/GPU / {peak:g}" in capsys.readouterr().out


@pytest.mark.parametrize("option", [["--gpus-per-node", "0"], ["--gpus-per-node", "-4"], ["--peak-tflops", "0"],
                                    ["--peak-tflops", "-989"], ["--peak-tflops", "inf"], ["--peak-tflops", "nan"],
                                    ["--baseline-row", "1", "--baseline-nodes", "8"]])
def test_impossible_option_values_are_one_error_line(tmp_path, capsys, option):
    """No GPUs per node (a division by zero in every row), a peak that makes no MFU (every row "not readable"), or
    two baselines at once: exit status 2, one ``error:`` line, no table."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "8n.log"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    try:
        status = main(["table", str(log), *option])
    except SystemExit as exit_info:  # argparse's own refusal
        status = exit_info.code
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert len([line for line in captured.err.splitlines() if "error:" in line]) == 1, captured.err
    assert "Traceback" not in captured.err


def test_a_plot_in_a_missing_folder_or_named_as_a_folder_is_refused_before_the_table(tmp_path, capsys):
    """``--plot missing/x.png`` printed the whole table, then ``[Errno 2] No such file or directory`` (exit 2, the
    option not named); ``--plot FOLDER`` was told it lacked an extension. Both are now one ``error:`` line naming
    ``--plot`` and the fix, before any log is read."""
    pytest.importorskip("matplotlib")
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "slurm-1.out"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    missing = tmp_path / f"plots-{random.randrange(10**6)}"
    assert main(["table", str(log), "--plot", str(missing / "scaling.png")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not missing.exists()
    assert captured.err == (f"oellm table: error: --plot {str(missing / 'scaling.png')!r}: folder {str(missing)!r} "
                            "does not exist; create it or name an image in an existing folder\n")
    folder = tmp_path / "figures.png"  # a folder whose name matplotlib would take for a PNG
    folder.mkdir()
    assert main(["table", str(log), "--plot", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"--plot {str(folder)!r} is a folder; name the image file" in captured.err


def test_a_missing_log_or_a_folder_of_logs_is_named_before_any_log_is_read(tmp_path, capsys):
    """A missing log ended in Python's ``[Errno 2] No such file or directory`` and a folder in ``[Errno 21] Is a
    directory``; each is now one ``error:`` line that names the path and the fix, whatever the order of the logs."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "slurm-1.out"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    missing = tmp_path / f"slurm-{random.randrange(2, 10**6)}.out"
    assert main(["table", str(log), str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"oellm table: error: log {str(missing)!r} does not exist " \
                                                  f"(relative to {os.getcwd()})\n"
    assert main(["table", str(tmp_path), str(log)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (f"oellm table: error: log {str(tmp_path)!r} is a folder; give its "
                                                   f"log files, e.g. {shlex.quote(str(tmp_path / '*.out'))}\n")


def test_a_plot_in_a_folder_the_user_cannot_write_is_refused_before_any_log_is_read(tmp_path, monkeypatch, capsys):
    """matplotlib failed only after every log was read and the table printed; the folder's write permission is
    checked with the other --plot checks. (The suite may run as root, whom permissions do not stop: os.access
    answers as for another user, for the plot's folder only.)"""
    pytest.importorskip("matplotlib")
    folder = tmp_path / f"shared-{random.randint(0, 10**6)}"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (False if os.fspath(path) == str(folder)
                                                                 else real_access(path, mode, **kw)))
    missing_log = tmp_path / "never-read.out"  # a log error would come next: the plot's folder is named first
    assert main(["table", str(missing_log), "--plot", str(folder / "scaling.png")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"oellm table: error: --plot {str(folder / 'scaling.png')!r}: folder {str(folder)!r} "
                                 "is not writable; name an image in a folder you can write to\n")


def test_a_plot_linked_to_a_file_that_is_no_image_is_refused_before_any_log_is_read(tmp_path, capsys):
    """``--plot fig.png`` with ``fig.png`` a link to ``notes.txt`` wrote the PNG into the notes, exit status 0: the
    extension was checked on the link's name only. Now one ``error:`` line naming the link's target, the notes
    kept."""
    pytest.importorskip("matplotlib")
    notes = tmp_path / "notes.txt"
    notes.write_text(f"run {random.randrange(10**6)}: 8 nodes looked slow\n")
    earlier = notes.read_bytes()
    link = tmp_path / "fig.png"
    link.symlink_to(notes.name)  # relative, as ln -s notes.txt fig.png makes it
    assert main(["table", str(tmp_path / "never-read.out"), "--plot", str(link)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"oellm table: error: --plot {str(link)!r} is a link to {str(notes.resolve())!r}, "
                                 "which is no image file: the plot would replace it; name the image file, e.g. "
                                 "scaling.png (or .pdf, .svg)\n")
    assert notes.read_bytes() == earlier


def test_a_log_through_a_symlink_loop_is_named_as_one_before_any_log_is_read(tmp_path, capsys):
    """A log path that is a symlink loop (or goes through one) was reported as "does not exist" while ``ls`` lists
    it; it is now one ``error:`` line that says it goes through a symlink loop, whatever the order of the logs."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    log = tmp_path / "slurm-1.out"
    log.write_text(megatron_log(args, random_times(10, random.uniform(60_000.0, 90_000.0)), [130.0] * 10))
    first, second = tmp_path / f"loop-{random.randrange(10**6)}", tmp_path / "loop-back"
    first.symlink_to(second.name)
    second.symlink_to(first.name)
    for looped in (first, first / "slurm-2.out"):
        logs = random.sample([str(log), str(looped)], 2)
        assert main(["table", *logs]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == (f"oellm table: error: log {str(looped)!r} cannot be resolved: "
                                                       "it goes through a symlink loop; point the link at the log "
                                                       "file\n")


def test_an_oellm_model_this_release_has_no_card_for_is_rebuilt_from_the_block():
    """A log of a newer release (or of a card renamed since) names a card this one lacks: the row read "unknown model"
    with no TFLOP/s or MFU, though its arguments block describes the model; it is now rebuilt from the block, as a
    run without ``--oellm-model`` is, and counted like the card it matches."""
    from megatron.oellm.run_log import parse_log_text
    from megatron.oellm.scaling_table import Window, summarise

    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    tflops = [round(random.uniform(100.0, 140.0), 1)] * 10
    known = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    unknown = {**known, "oellm_model": f"qwen9-{random.randrange(10, 1000)}b-future"}
    rows = [summarise(parse_log_text(megatron_log(args, times, tflops)), Window(), 4) for args in (known, unknown)]
    assert rows[1].ok and rows[1].model == rows[0].model == "qwen3.5-35b-a3b"
    assert rows[1].tflops_per_gpu == pytest.approx(rows[0].tflops_per_gpu) and rows[1].tflops_per_gpu is not None


def test_an_oellm_model_without_a_card_whose_block_matches_none_keeps_its_logged_name():
    """A logged ``--oellm-model`` this release has no card for, whose arguments block matches no registry card either
    (a model added in a newer release): the row read ``unregistered model`` and the logged name was lost. It now reads
    ``NAME (no card here)``, with the rebuilt card's TFLOP/s; two different models logged under one such name are
    still no scaling series (their architectures differ)."""
    from megatron.oellm.run_log import parse_log_text
    from megatron.oellm.scaling_table import Window, summarise
    from megatron.oellm.scaling_table.summary import comparable

    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    tflops = [round(random.uniform(100.0, 140.0), 1)] * 10
    known = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    name = f"qwen9-{random.randrange(10, 1000)}b-future"
    widths = random.sample([width for width in range(256, 1024, 64) if width != known["moe_ffn_hidden_size"]], 2)
    rows = [summarise(parse_log_text(megatron_log({**known, "oellm_model": name, "moe_ffn_hidden_size": width},
                                                  times, tflops)), Window(), 4) for width in widths]
    assert [row.model for row in rows] == [f"{name} (no card here)"] * 2
    assert all(row.ok and row.tflops_per_gpu is not None for row in rows)
    assert not comparable(rows[1], rows[0])
    unnamed = {**{key: value for key, value in known.items() if key != "oellm_model"}, "moe_ffn_hidden_size": widths[0]}
    assert summarise(parse_log_text(megatron_log(unnamed, times, tflops)), Window(), 4).model == (
        f"unregistered model (qwen3.5-35b-a3b but moe_ffn_hidden_size {widths[0]})")


def test_a_logged_model_without_a_card_and_without_an_architecture_keeps_its_name():
    """A block that names a card this release lacks and describes no model either (its sizes missing) read "unknown
    model", losing the name the run logged."""
    from megatron.oellm.scaling_table.identify import NO_CARD_HERE, identify_model

    name = f"qwen9-{random.randrange(10, 1000)}b-future"
    assert identify_model({"oellm_model": name}) == (f"{name} {NO_CARD_HERE}", None)
