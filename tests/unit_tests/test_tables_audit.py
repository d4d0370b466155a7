"""``oellm table`` and its log parser on cases a mutation audit of ``run_log.py`` and ``scaling_table.py`` found
untested: a whole line whose skipped-iterations field another rank cut into, a log whose first start lost its arguments
block, the reason megatron's result validation exited for, the crash message of interleaved ranks, a one-line run
that finished after a handled traceback, logs named by their folder, undecodable bytes, a run exactly as long as the
window's first iteration, and ``--baseline-row`` values that name no row with numbers. Logs in megatron-core 0.19.2's
formats (shared helpers), fresh random step times."""

from __future__ import annotations

import csv
import io
import random
import statistics

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text, read_log
from megatron.oellm.scaling_table import TableError, Window, summarise, with_efficiency
from tests.unit_tests.megatron_logs import (
    args_block,
    iteration_line,
    megatron_args,
    megatron_log,
    random_times,
    resized,
    rows_with_tokens,
)

DONE = "[after training is done] datetime: 2026-10-19 12:10:00.000000 "


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe (log interval 1, 10 iterations)."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _times(n: int = 10) -> list[float]:
    """``n`` step times (ms) around a fresh random centre, two warm-up iterations first."""
    return random_times(n, random.uniform(60_000.0, 90_000.0))


def _lines(args: dict, times: list[float], total: int = 10, first: int = 1) -> list[str]:
    """Megatron's iteration lines for ``times`` from iteration ``first`` on (fresh random TFLOP/s)."""
    return [iteration_line(i, total, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
            for i, ms in enumerate(times, start=first)]


def test_a_line_whose_skipped_count_another_rank_cut_into_is_left_out(args):
    """A whole-looking line whose ``number of skipped iterations`` another rank's output cut into is a cut line: left
    out (the row names the missing iteration), not read with the count taken as 0 nor a parser error that loses the
    whole table."""
    times, cut = _times(), random.randint(4, 9)
    lines = _lines(args, times)
    lines[cut - 1] = lines[cut - 1].replace("number of skipped iterations:   0 |",
                                            f"number of skipped iterations:   [rank{random.randint(1, 31)}]: W1019 |")
    log = parse_log_text("\n".join([*args_block(args), *lines, DONE]))
    assert sorted(log.iterations) == [i for i in range(1, 11) if i != cut]
    line = len(args_block(args)) + cut  # the cut line's number in the file
    assert summarise(log, Window(), 4).status == \
        f"no line for iteration {cut} of the window 3-10 (the line of iteration {cut} is cut: line {line})"
    assert summarise(log, Window(cut + 1, 10), 4).ok


def test_an_arguments_block_does_not_describe_the_lines_printed_before_it(args):
    """A log whose first start lost its arguments block (the file begins mid-run), then a new start with a block of
    its own (here on twice the GPUs): the first start's lines must not be read with the later start's arguments,
    which gave an ok row with the other job's node count and tokens/s/GPU."""
    bigger = resized(args, 64)
    cancelled = "slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 DUE TO TIME LIMIT ***"
    text = "\n".join([*_lines(args, _times()), *args_block(bigger), *_lines(bigger, _times(2)), cancelled])
    log = parse_log_text(text)
    assert len(log.runs) == 2 and log.runs[0].args == {} and log.runs[1].args["world_size"] == 64
    row = summarise(log, Window(), 4)
    assert not row.ok and row.status.startswith("no arguments block") and row.nodes is None
    assert summarise(log, Window(1, 3), 4).status == "cancelled (time limit) at iteration 2"


def test_the_result_validation_status_names_the_result_megatron_exited_on(args):
    """A non-fatal spiky-loss rejection one line before the NaN that made megatron's rerun state machine exit: the row
    names the NaN (the cause of the exit), not the earlier warning."""
    stop = random.randint(5, 10)  # the rejected iteration: it prints no line
    rank = random.randint(0, 31)
    spiky = (f"WARNING:megatron.core.rerun_state_machine:Unexpected result {random.uniform(20, 90):.1f} on rank {rank} "
             f"at iteration #{stop - 1} invocation #1 (message='Spiky loss')")
    nan = (f"ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank {rank} at iteration #{stop} "
           "invocation #1 (message='found NaN in local forward loss calculation')")
    exiting = "WARNING:megatron.core.rerun_state_machine:Exiting now. The job can be resumed from a previous checkpoint"
    lines = _lines(args, _times(stop - 1))
    text = "\n".join([*args_block(args), *lines[:-1], spiky, lines[-1], nan, exiting])
    row = summarise(parse_log_text(text), Window(3, 10), 4)
    assert row.status == (f"stopped by megatron's result validation (nan: found NaN in local forward loss calculation) "
                          f"at iteration {stop - 1}")


def test_a_crash_message_is_read_from_the_crashing_ranks_own_lines(args):
    """Two ranks' tracebacks printed at once, line by line: the row names the exception of the last traceback's rank
    (``3: ``), not the first exception line of any rank after its header (``5: ``'s)."""
    message = f"expert capacity exceeded on rank 3 at step {random.randint(1, 10**6)}"
    tail = ["5: Traceback (most recent call last):",
            "3: Traceback (most recent call last):",
            '5:   File "/opt/venv/lib/python3.11/site-packages/megatron/core/datasets/gpt_dataset.py", line 330, in get',
            '3:   File "/opt/venv/lib/python3.11/site-packages/megatron/core/transformer/moe/router.py", line 88, in f',
            "5: ValueError: sample index out of range",
            f"3: RuntimeError: {message}"]
    times = _times()
    text = "\n".join([*(f"7: {line}" for line in [*args_block(args), *_lines(args, times, total=20)]), *tail])
    assert summarise(parse_log_text(text), Window(), 4).status == \
        f"ok (crashed (RuntimeError: {message}) at iteration 10, after the window)"


def test_a_one_line_run_that_finished_after_a_handled_traceback_is_no_crash(args):
    """A one-iteration smoke run (``--train-iters 1``) whose data loader logged a retried read before its only line:
    that line and megatron's end-of-training line show training went on, so the row has its numbers."""
    one = {**args, "train_iters": 1}
    retried = ["WARNING:oellm_data.retry:reading sample 1048576 failed, retrying in 5 s",
               "Traceback (most recent call last):",
               '  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 52, in fetch',
               "TimeoutError: [Errno 110] Connection timed out"]
    ms = round(random.uniform(60_000.0, 90_000.0), 1)
    log = parse_log_text("\n".join([*args_block(one), *retried, *_lines(one, [ms], total=1), DONE]))
    assert log.runs[-1].failure == ""
    row = summarise(log, Window(1, 1), 4)
    assert row.ok and row.step_time_s == pytest.approx(ms / 1000, rel=1e-12)


def test_rows_name_their_logs_by_the_path_given(args, tmp_path, capsys):
    """Every job of a sweep writes ``slurm.out`` in its own folder: the table's log column must keep the folder, or
    the rows of 8 and 16 nodes read as the same file."""
    paths = []
    for nodes in (8, 16):
        path = tmp_path / f"{nodes}n" / "slurm.out"
        path.parent.mkdir()
        path.write_text(megatron_log(resized(args, nodes * 4), _times(), [130.0] * 10))
        paths.append(str(path))
    assert read_log(paths[0]).path == paths[0]
    assert main(["table", *paths, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {(row["log"], row["nodes"]) for row in rows} == {(paths[0], "8"), (paths[1], "16")}


def test_a_log_with_undecodable_bytes_still_gives_its_row(args, tmp_path):
    """A log with bytes that are no UTF-8 (a node's Latin-1 locale in a warning, a file cut mid-character) is read
    with them replaced: its row keeps its numbers instead of failing to decode."""
    times = _times()
    text = megatron_log(args, times, [130.0] * 10)
    path = tmp_path / "latin1.log"
    path.write_bytes(b"W1019 Temp\xe9rature du n\xbfud \xff\n" + text.encode() + DONE.encode() + b"\n\xe2\x82")
    row = summarise(read_log(path), Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)


def test_a_run_as_long_as_the_windows_first_iteration_is_given_the_window_it_covers(args):
    """A run of exactly ``FIRST`` iterations reaches into the window ``FIRST-LAST``: the row says so and names the
    one-iteration window that gives its numbers (not 'ends before the window')."""
    first = random.randint(3, 8)
    short = {**args, "train_iters": first}
    times = _times(first)
    log = parse_log_text("\n".join([*args_block(short), *_lines(short, times, total=first), DONE]))
    status = summarise(log, Window(first, 10), 4).status
    assert status == (f"run of {first} iterations ends inside the window {first}-10: its numbers would cover only "
                      f"{first}-{first}; give --window {first}-{first} for them")
    advised = summarise(log, Window(first, first), 4)
    assert advised.ok and advised.step_time_s == pytest.approx(times[-1] / 1000, rel=1e-12)


def test_baseline_row_zero_is_refused(tmp_path, capsys):
    """``--baseline-row`` is 1-based: 0 must be an error naming the rows, not a silent baseline of the last row."""
    rows = rows_with_tokens({4: random.uniform(5000, 7000), 8: random.uniform(5000, 7000)})
    with pytest.raises(TableError, match=r"--baseline-row 0: the table has rows 1\.\.2"):
        with_efficiency(rows, baseline_row=0)
    log = tmp_path / "8n.log"
    log.write_text(megatron_log(megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32}), _times(),
                                [130.0] * 10))
    assert main(["table", str(log), "--baseline-row", "0"]) == 2
    assert "--baseline-row 0" in capsys.readouterr().err


def test_a_baseline_row_without_numbers_is_refused():
    """``--baseline-row`` on a failed row: an error naming its status, not a table with no efficiencies (or a
    traceback formatting the baseline's missing node count)."""
    rows = rows_with_tokens({4: random.uniform(5000, 7000), 8: random.uniform(5000, 7000)})
    failed = summarise(parse_log_text("torch.OutOfMemoryError: CUDA out of memory"), Window(), 4)
    with pytest.raises(TableError, match=r"--baseline-row 3 has no numbers \(out of memory\); pick an ok row"):
        with_efficiency([*rows, failed], baseline_row=3)
