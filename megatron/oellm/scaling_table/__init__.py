"""Scaling tables from Megatron logs, in the format of the benchmark reports (markdown, CSV, PNG).

One row per log: nodes, GPUs, sequence length, global and micro batch size, the median (or mean) step time over an iteration window
(default 3-10, as the reports), tokens/s/GPU, TFLOP/s/GPU from our FLOP accounting
(:func:`megatron.oellm.flops.training_flops_per_token` of the run's card) and Megatron's logged value, MFU and the
efficiency against a baseline row. A log holding several starts of the program (a requeued job appending to its
log) is read with the arguments and the failure of the run that printed the window's lines; when an earlier start
in it also ran the whole window (a log appended twice, whatever ended the earlier run), a ``note:`` says which start
the row reads (:func:`~megatron.oellm.scaling_table.window.earlier_window_note`), and a ``note:`` names a later
start in it that failed without a line in the window (:func:`~megatron.oellm.scaling_table.window.later_failure_note`).
A log holding the job's output twice (a ``tee`` into the file ``sbatch -o`` writes) is read once, with a ``note:``
(:func:`~megatron.oellm.scaling_table.window.doubled_note`). Per-task output files put one after the other (rank
0's, holding the checkpoint load and save lines and how the run ended, before the last rank's iteration lines) get a
``note:`` too (:func:`~megatron.oellm.scaling_table.window.per_task_files_note`): their lines are read in file order.
A run that ran out of
memory, timed out in NCCL, was stopped by megatron's check of a NaN or Inf result, crashed or was cancelled (unless
after the window: see below), or that stops before the window ends (``truncated``; ``ends at iteration k/N ...: still running, or killed without a
message`` for a log written moments ago, moments after its last iteration line's timestamp, with no line saying how
it ended, or one that stops at a checkpoint save begun within the hour (or three log intervals at the run's pace,
when longer), ``still running (saving ...)``; or
``exited`` with the flag when megatron reports an early exit it was asked for: ``--exit-interval``,
``--exit-duration-in-mins``, ``--exit-signal-handler``)
gives a row that says so and carries no numbers (the configuration its arguments give, nodes, GPUs, sequence length
and batch sizes, still shown: :func:`~megatron.oellm.scaling_table.summary.failed_row`); so does a window whose
lines do not average exactly its own iterations (a line missing or cut, a line
that also covers warm-up before the window, a restart inside it) or that has skipped steps, a time that is not a
positive number, a change of the global batch size, or arguments the numbers need that are not positive integers;
and so do numbers that cannot be right (:func:`~megatron.oellm.scaling_table.summary.implausible_numbers`: a
``world_size`` other than the product of the parallel sizes the block prints, or no whole number of nodes, a
``seq_length`` other than the block's ``encoder_seq_length``, or an MFU above 100 %, as a value another rank's output
cut in two gives).
A run SLURM stopped for no fault of its own (its time limit, ``scancel``, a preemption or a requeue) once the line of
the window's last iteration was printed whole, or whose failure is first shown after that line (an NCCL timeout at
teardown, a full disk in the final save, an out-of-memory error at a later iteration), keeps its numbers, its status
``ok (cancelled (time limit) at iteration N, after the window)`` or ``ok (NCCL timeout at iteration N, after the
window)`` (:func:`~megatron.oellm.scaling_table.window.with_stop_note`); a cut line is no whole line, and a task's
failure that made srun end the step is named as that failure (:func:`megatron.oellm.run_log.task_failure`).
Our TFLOP/s and the MFU are n/a for a model that cannot be identified from its arguments, or whose vocabulary the log
gives neither as ``vocab_size`` nor in megatron's ``padded vocab`` line (Megatron's logged TFLOP/s is still shown).
Rows with numbers come first, sorted by model, sequence length, global batch size and nodes (:func:`sorted_rows`).
The efficiency rates only rows of the baseline's scaling series: its model, sequence length and benchmark settings
that are no scaling dimension (forced or real routing, the token dispatcher and its backend, the attention backend,
recompute, FP8), and its global batch size or global batch size per GPU; the footnote and a ``note:`` name the
setting that splits a table's rows into several series, and the markdown's Setup column, there only where rows differ
in one, gives each row's values of those settings. The CSV gives every number unrounded, the MFU and the
efficiency as fractions (``mfu_fraction``, ``efficiency_fraction``: 0.116 where the markdown prints 11.6%).

Modules: ``rows`` (the row and window types), ``identify`` (the model and vocabulary from a run's arguments),
``window`` (which lines a row reads, and why a run gives none), ``summary`` (a log -> a row; order, baseline and
efficiency), ``formats`` (markdown, CSV), ``plot`` (PNG).
"""

from megatron.oellm.scaling_table.formats import CSV_FIELDS, format_csv, format_markdown
from megatron.oellm.scaling_table.plot import check_plot_path, plot, scaling_series
from megatron.oellm.scaling_table.rows import (
    DEFAULT_GPU,
    DEFAULT_PEAK_TFLOPS,
    RowPeak,
    ScalingRow,
    TableError,
    Window,
)
from megatron.oellm.scaling_table.summary import (
    baseline_ties_note,
    given_peak_note,
    row_peak,
    sorted_rows,
    summarise,
    unrated_rows_note,
    with_efficiency,
)
from megatron.oellm.scaling_table.window import (
    doubled_note,
    earlier_window_note,
    interval_start,
    later_failure_note,
    per_task_files_note,
    window_run,
)

__all__ = [
    "CSV_FIELDS", "DEFAULT_GPU", "DEFAULT_PEAK_TFLOPS", "RowPeak", "ScalingRow", "TableError", "Window",
    "baseline_ties_note", "check_plot_path", "doubled_note", "earlier_window_note", "format_csv", "format_markdown",
    "given_peak_note", "interval_start", "later_failure_note", "per_task_files_note", "plot", "row_peak",
    "scaling_series", "sorted_rows", "summarise", "window_run",
    "unrated_rows_note", "with_efficiency",
]
