"""``oellm table LOG... [--window 3-10] [--gpus-per-node 4] [--baseline-row N|--baseline-nodes N] ...``."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import shlex
import sys
from pathlib import Path

from megatron.oellm.commands import refuse
from megatron.oellm.paths import symlink_loop
from megatron.oellm.peaks import GPU_PEAKS, peak_text, peak_tflops, valid_peak
from megatron.oellm.run_log import read_log
from megatron.oellm.scaling_table import (
    CSV_FIELDS,
    DEFAULT_GPU,
    DEFAULT_PEAK_TFLOPS,
    RowPeak,
    ScalingRow,
    TableError,
    Window,
    baseline_ties_note,
    check_plot_path,
    doubled_note,
    earlier_window_note,
    format_csv,
    format_markdown,
    given_peak_note,
    later_failure_note,
    per_task_files_note,
    plot,
    row_peak,
    sorted_rows,
    summarise,
    unrated_rows_note,
    window_run,
    with_efficiency,
)

HELP = "scaling table (markdown, CSV, PNG) from Megatron stdout logs: medians over an iteration window"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``oellm table``."""
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="Megatron stdout log of one run each, all tasks' output in one file (rank 0 prints the "
                             "arguments, the last rank the iteration lines; per-task files put one after the other "
                             "get a note: their lines are read in file order), gzip-, xz-, bzip2- or zstd-compressed or not "
                             "(zstd through Python 3.14's compression.zstd or the zstandard package); output written "
                             "into it twice (a tee into sbatch's own output file) is read once; a run "
                             "SLURM stopped (its time limit, scancel, a preemption or a requeue) once the line of the "
                             "window's last iteration was printed whole keeps its numbers, its status 'ok (cancelled "
                             "... after the window)'; so does a run whose failure is first shown after that line "
                             "('ok (NCCL timeout ... after the window)'); a cut line is no whole line. Exit status 1 "
                             "when no row has numbers (the table is still printed, no --plot written)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node (default 4: MN5, Jupiter)")
    parser.add_argument("--window", default="3-10",
                        help="iterations FIRST-LAST to take medians over (default 3-10, after the warm-up); at a log "
                             "interval N above 1 each line is the mean of N iterations, and the footnote says "
                             "'medians of N-iteration means'")
    parser.add_argument("--statistic", choices=("median", "mean"), default="median",
                        help="summary of the window's iterations (default median, as the reports)")
    baseline = parser.add_mutually_exclusive_group()
    baseline.add_argument("--baseline-row", type=int,
                          help="efficiency relative to this row of the printed table (1-based; the rows with numbers "
                               "come first, sorted by model, sequence length, global batch size and nodes, then the "
                               "rows without)")
    baseline.add_argument("--baseline-nodes", type=float,
                          help="efficiency relative to the row on this many nodes (default: the first run of the "
                               "largest series); only rows of its model, sequence length and benchmark settings "
                               "(forced or real routing, dispatcher and its backend, attention backend, recompute, "
                               "FP8) with its global batch size (strong scaling) or global batch size per GPU (weak "
                               "scaling) get one, the others are named on stderr with the setting that split them")
    peak = parser.add_mutually_exclusive_group()
    peak.add_argument("--peak-tflops", type=float, default=None,
                      help="MFU denominator, TFLOP/s per GPU, for every row (default: the peak of a log's [oellm] "
                           f"throughput basis line, else {peak_text(DEFAULT_PEAK_TFLOPS)}: H100/GH200 BF16)")
    peak.add_argument("--gpu", choices=sorted(GPU_PEAKS),
                      help="GPU of the MFU denominator (its dense BF16 peak), with its note in the footnote, e.g. "
                           "gh200 for Jupiter's power-capped superchips")
    parser.add_argument("--format", choices=("md", "csv"), default="md",
                        help=f"output format (default md). csv: one column per row field, unrounded "
                             f"({', '.join(CSV_FIELDS)}; tflops_per_gpu is our FLOP count, tflops_per_gpu_logged "
                             "megatron's; scaling is baseline, strong or weak: the series that rates the row); "
                             "mfu_fraction and efficiency_fraction are fractions (0.116 = 11.6%%), where the markdown "
                             "prints percentages; window, statistic and baseline_log repeat the table's footnote on "
                             "every row; peak_tflops is the row's own MFU peak (its log's, or --gpu/--peak-tflops), "
                             "the last columns are the run's benchmark settings")
    parser.add_argument("--plot", metavar="PNG", help="also write throughput and efficiency vs nodes to this PNG, "
                                                      "one line per strong- or weak-scaling series")
    parser.add_argument("--title", default="", help="title of the plot (needs --plot)")


def expand_log_patterns(paths: list[str]) -> tuple[list[str], list[str]]:
    """``paths`` with each one that names no file but is a shell pattern (``*``, ``?``, ``[``) replaced by the files
    it matches, sorted, and the patterns that match none. A shell passes a pattern that matches nothing as typed:
    the printed command of a recipe names one pattern per row group, and a row whose job has not run yet left the
    whole table refused as "does not exist"; a quoted pattern is expanded here as the shell would have. A file
    named twice (a pattern and a path, a relative and an absolute spelling) is read once."""
    logs, unmatched, seen = [], [], set()
    for path in paths:
        if os.path.exists(path) or not glob.has_magic(path):
            found = [path]
        elif not (found := sorted(glob.glob(path))):
            unmatched.append(path)
        for log in found:  # one row per file: a pattern and a path (or two spellings) may name the same log
            real = os.path.realpath(log)
            if real not in seen:
                seen.add(real)
                logs.append(log)
    return logs, unmatched


def check_log_paths(paths: list[str], plot: str | None = None) -> None:
    """Raise :class:`TableError` for a log path that does not exist, goes through a symlink loop or is a folder,
    before any log is read (a folder of logs is given as its files: the message names a pattern that matches them,
    :func:`_folder_logs_hint`), or that is the ``--plot`` file, which the plot would replace (a shell glob such as
    ``row*/*`` picks up an earlier plot, and a mistyped ``--plot`` names a log)."""
    for path in paths:
        if os.path.isdir(path):
            raise TableError(f"log {path!r} is a folder; {_folder_logs_hint(path)}")
        if not os.path.exists(path):
            raise TableError(_missing_log_message(path))
        if plot is not None and os.path.exists(plot) and os.path.samefile(path, plot):
            raise TableError(f"--plot {plot!r} is the log {path!r}: the plot would replace it; name another image "
                             "file, or leave the image out of the logs")


FOLDER_LOG_PATTERNS = ("*.out", "*/slurm-*.out", "*/*/slurm-*.out")
"""Where the logs of a folder given as a log may be, relative to it, the first tried first: in it, or in its run
directories as a recipe writes them (``<recipe dir>/rowNN-Mn/slurm-ID.out``: a recipe's folder), or one level deeper
(the output folder, ``oellm-runs``, holding each recipe's folder)."""


def _folder_logs_hint(folder: str) -> str:
    """What to give instead of ``folder``: the first of :data:`FOLDER_LOG_PATTERNS` under it that matches a file (a
    suggestion that matches nothing was refused in turn), shell-quoted with the folder's own glob characters escaped,
    so that it matches the same files pasted into a shell or given to ``oellm table``; or, where none does, that no
    such pattern matches (a log of another name is still a log)."""
    for pattern in FOLDER_LOG_PATTERNS:
        escaped = os.path.join(glob.escape(folder), pattern)
        if any(os.path.isfile(match) for match in glob.iglob(escaped)):
            return f"give its log files, e.g. {shlex.quote(escaped)}"
    tried = ", ".join(os.path.join(folder, pattern) for pattern in FOLDER_LOG_PATTERNS)
    return f"none of {tried} matches a file in it; give the log files themselves"


def _missing_log_message(path: str) -> str:
    """Why the log ``path``, which :func:`os.path.exists` denies, cannot be read: a symlink loop on its way (it was
    reported as "does not exist" while ``ls`` lists the link) or, else, that it does not exist."""
    if symlink_loop(Path(path)) is not None:
        return f"log {path!r} cannot be resolved: it goes through a symlink loop; point the link at the log file"
    return f"log {path!r} does not exist (relative to {os.getcwd()})"


def log_row(path: str, window: Window, gpus_per_node: int, given: RowPeak | None) -> tuple[ScalingRow, str]:
    """The row of the log at ``path`` and its ``note:`` lines, one per line ('' for none). Its MFU is against the
    user's peak (``given``; None: none given), else the one the log's ``[oellm] throughput basis`` line names
    (:func:`~megatron.oellm.scaling_table.row_peak`), with a note where the two differ
    (:func:`~megatron.oellm.scaling_table.given_peak_note`). For any row, one note when the
    job's output was written into the log twice and read once (:func:`~megatron.oellm.scaling_table.doubled_note`)
    and one when it holds per-task output files put one after the other
    (:func:`~megatron.oellm.scaling_table.per_task_files_note`); for a row with numbers, one when an earlier start in
    the log also ran the window (:func:`~megatron.oellm.scaling_table.earlier_window_note`) and one when a later
    start in it failed (:func:`~megatron.oellm.scaling_table.later_failure_note`): two runs in one log must not pass
    as one, nor a copy as a second run, nor a later failure go unseen. A value in it that cannot be read gives that
    row a status instead of stopping the table (the other logs' rows are kept). A file the system cannot read is
    refused, naming it."""
    try:
        log = read_log(path)
        peak = row_peak(window_run(log, window).logged_peak, given)
        row = summarise(log, window, gpus_per_node, peak.tflops)
    except TableError:
        raise
    except OSError as err:  # after the paths were checked: no permission, an I/O error of the file system
        raise TableError(f"log {path!r} cannot be read ({err.strerror or err})") from err
    except ValueError as err:
        return ScalingRow(path, "unknown model", f"log not readable: {err}"), ""
    if row.ok:
        row = dataclasses.replace(row, peak=peak)
    notes = (doubled_note(log), per_task_files_note(log),
             *((earlier_window_note(log, window), later_failure_note(log, window), given_peak_note(path, peak))
               if row.ok else ()))
    return row, "\n".join(note for note in notes if note)


def available_baseline_nodes(baseline_nodes: float | None, rows: list[ScalingRow], rows_missing: bool) -> float | None:
    """``--baseline-nodes``, or None (the default baseline, with a ``note:`` saying so) when no row on that many
    nodes has numbers while a row is still to come (``rows_missing``: a pattern matched nothing) or failed: the rest
    of the table is still worth printing. With every row there and ok, the count is left for
    :func:`~megatron.oellm.scaling_table.with_efficiency` to refuse as a mistake."""
    if baseline_nodes is None or any(row.ok and row.nodes == baseline_nodes for row in rows):
        return baseline_nodes
    if not rows_missing and all(row.ok for row in rows):
        return baseline_nodes
    print(f"note: --baseline-nodes {baseline_nodes:g}: no row on that many nodes has numbers (its job has not run "
          "yet, or failed: see the Status column); the efficiencies are against the default baseline", file=sys.stderr)
    return None


def run(args: argparse.Namespace) -> int:
    """Parse every log, print the table, optionally plot; 2 on bad options or an unreadable log, 1 when no row has
    numbers (the table is printed, so that its Status column says why; a script must not read it as a result) or the
    plot cannot be written after the table is printed."""
    try:
        if args.gpus_per_node < 1:
            raise TableError("--gpus-per-node must be >= 1")
        if args.peak_tflops is not None and not valid_peak(args.peak_tflops):
            raise TableError(f"--peak-tflops must be a positive number, got {args.peak_tflops:g}")
        peak = (args.peak_tflops if args.peak_tflops is not None
                else peak_tflops(args.gpu) if args.gpu else DEFAULT_PEAK_TFLOPS)
        if args.title and args.plot is None:
            raise TableError("--title is the plot's title: give --plot PNG too, or drop --title")
        if args.plot is not None:
            check_plot_path(args.plot)
        logs, unmatched = expand_log_patterns(args.logs)
        for pattern in unmatched:
            print(f"note: no log matches {pattern!r} (relative to {os.getcwd()}): left out (a row whose job has not "
                  "run yet?)", file=sys.stderr)
        if not logs:
            raise TableError(f"no log to read: {', '.join(map(repr, unmatched))} "
                             f"{'matches' if len(unmatched) == 1 else 'match'} no file")
        check_log_paths(logs, args.plot)
        window = Window.parse(args.window, args.statistic)
        given = RowPeak(peak, args.gpu, given=True) if args.gpu or args.peak_tflops is not None else None
        read = [log_row(path, window, args.gpus_per_node, given) for path in logs]
        rows = sorted_rows([row for row, _ in read])
        baseline_nodes = available_baseline_nodes(args.baseline_nodes, rows, rows_missing=bool(unmatched))
        rows, baseline = with_efficiency(rows, args.baseline_row, baseline_nodes)
        note = GPU_PEAKS[args.gpu].note if args.gpu else ""
        gpu = args.gpu or (DEFAULT_GPU if args.peak_tflops is None else None)  # whose FP8 peak the footnote names
        print(format_csv(rows, baseline, window, peak) if args.format == "csv"
              else format_markdown(rows, baseline, window, peak, note, gpu))
        ties = None if args.baseline_row is not None else baseline_ties_note(rows, baseline)
        if ties:  # the baseline was picked by order among equals: say which, and how to pick another
            print(ties, file=sys.stderr)
        unrated = unrated_rows_note(rows, baseline)
        if unrated:
            print(unrated, file=sys.stderr)
        for _, note in read:
            if note:
                print(note, file=sys.stderr)
    except (TableError, OSError) as err:
        return refuse("table", err)
    if not any(row.ok for row in rows):
        unplotted = f"; --plot {args.plot} not written" if args.plot is not None else ""
        return refuse("table", f"no row has numbers: the Status column above says why{unplotted}", status=1)
    if args.plot is not None:
        try:
            plot(rows, args.plot, args.title)
        except OSError as err:  # after the table is on stdout: a name too long, a full disk, a lost quota
            return refuse("table", f"cannot write --plot {args.plot} ({err.strerror or err}); the table is printed "
                          "above", status=1)
    return 0
