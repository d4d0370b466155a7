"""``oellm table`` on malformed logs: each gives a marked row (or a clear error), never a silently wrong number; and
a crash message in a row is shortened only past 80 characters."""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import last_exception, parse_log_text
from megatron.oellm.scaling_table import Window, interval_start, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, megatron_log, resized

TIMES = [225000.0, 112000.0, 75000.0, 75400.0, 74800.0, 75100.0, 75300.0, 74900.0, 75200.0, 75000.0]
"""Two warm-up iterations, then steady steps (ms)."""


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _lines(args: dict, times: dict[int, float], total: int = 10, block: bool = True) -> list[str]:
    """The arguments block (optional) and the lines of the given iterations."""
    head = args_block(args) if block else []
    return head + [iteration_line(i, total, args["global_batch_size"], ms, 130.0) for i, ms in times.items()]


def _status(text: str, window: Window | None = None) -> str:
    """The table row's status for a log's text (default window 3-10)."""
    return summarise(parse_log_text(text), window or Window(), 4).status


def _edit(text: str, iteration: int, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new`` in the line of ``iteration``."""
    lines = text.split("\n")
    index = next(k for k, line in enumerate(lines) if f"iteration {iteration:8d}/" in line)
    assert old in lines[index]
    lines[index] = lines[index].replace(old, new)
    return "\n".join(lines)


def test_a_line_cut_mid_number_is_not_read(args):
    """A killed job's last, half-written line must not give 75 ms (nor 13 TFLOP/s or a GBS of 40)."""
    text = megatron_log(args, TIMES, [130.0] * 10).rstrip("\n")
    for cut_after in ("elapsed time per iteration (ms): 75", "throughput per GPU (TFLOP/s/GPU): 13",
                      "global batch size:  40", "number of skipped iterations:   0 |", "number of nan iterations:   0"):
        cut = text[:text.rindex(cut_after) + len(cut_after)]
        log = parse_log_text(cut)
        assert sorted(log.iterations) == list(range(1, 10))
        line = cut.count("\n") + 1  # the cut line is the last one
        assert summarise(log, Window(), 4).status == \
            f"truncated at iteration 9/10 (the line of iteration 10 is cut: line {line})"


def test_a_field_another_rank_cut_into_is_not_read_as_its_first_digits(args):
    """A whole line whose global batch size or consumed samples another rank's output cut into: the field counts as
    not logged (the arguments' batch is used, the consumed-samples check skipped), not as the digits before the cut,
    which would give a global batch of 40 (1% of the tokens/s) or a batch-size change that never happened."""
    gbs, seq = args["global_batch_size"], args["seq_length"]
    text = megatron_log(args, TIMES, [130.0] * 10)
    cut_batch = _edit(text, 7, f"global batch size: {gbs:5d} |", f"global batch size: {str(gbs)[:2]}[rank3]: x")
    log = parse_log_text(cut_batch)
    assert 7 in log.iterations and log.iterations[7].global_batch_size is None
    row = summarise(log, Window(7, 7), 4)
    # one iteration of gbs x seq tokens in TIMES[6] ms on the 32 GPUs of the arguments block
    assert row.ok and row.tokens_per_s_per_gpu == pytest.approx(gbs * seq / (TIMES[6] / 1000) / 32, rel=1e-12)
    every_5 = {**args, "log_interval": 5}
    lines = "\n".join(_lines(every_5, {1: 225000.0, 5: 90000.0, 10: 75000.0}))
    cut_samples = _edit(lines, 5, f"consumed samples: {5 * gbs:12d} |", f"consumed samples: {str(5 * gbs)[:2]}[rank3]")
    assert parse_log_text(cut_samples).iterations[5].consumed_samples is None
    assert summarise(parse_log_text(cut_samples), Window(6, 10), 4).step_time_s == pytest.approx(75.0)
    # a time with a dot and no decimal is no number megatron prints ({:.1f}): the line is cut, not read
    cut_time = _edit(text, 6, "(ms): 75100.0 |", "(ms): 75100. |")
    assert 6 not in parse_log_text(cut_time).iterations


def test_skipped_and_nan_iterations_in_the_window_mark_the_row(args):
    text = megatron_log(args, TIMES, [130.0] * 10)
    skipped = _edit(text, 5, "number of skipped iterations:   0", "number of skipped iterations:   1")
    assert parse_log_text(skipped).iterations[5].skipped_iterations == 1
    assert _status(skipped) == "skipped steps in the window 3-10: the line of iteration 5 counts 1 skipped, 0 NaN"
    nan = _edit(skipped, 5, "number of nan iterations:   0", "number of nan iterations:   1")
    assert _status(nan) == "skipped steps in the window 3-10: the line of iteration 5 counts 1 skipped, 1 NaN"
    assert summarise(parse_log_text(nan), Window(6, 10), 4).ok  # outside the window: fine


def test_a_restart_inside_the_window_marks_the_row(args):
    """A requeued job appends to its log: the resumed process's first (slow) iterations are not steady steps."""
    first = _lines(args, dict(enumerate(TIMES[:7], start=1)))
    overlapping = first + _lines(args, {6: 300000.0, 7: 75000.0, 8: 75000.0, 9: 75000.0, 10: 75000.0})
    adjacent = first + _lines(args, {8: 300000.0, 9: 75000.0, 10: 75000.0})
    no_header = first + _lines(args, {6: 300000.0, 7: 75000.0, 8: 75000.0, 9: 75000.0, 10: 75000.0}, block=False)
    for text, suggested in ((overlapping, "8-10"), (adjacent, "10-10"), (no_header, "8-10")):
        assert _status("\n".join(text)) == ("the window 3-10 spans a restart: its lines come from 2 starts of the "
                                           f"program; e.g. --window {suggested}, the last start's lines after its "
                                           "warm-up")
        assert summarise(parse_log_text("\n".join(text)), Window.parse(suggested), 4).ok  # the advice works
    log = parse_log_text("\n".join(adjacent))
    assert [run.start for run in log.runs] == [1, 8] and log.iterations[8].run == 1 and log.iterations[7].run == 0
    rerun = first + _lines(args, dict(enumerate(TIMES, start=1)))  # started again from scratch: a whole run
    assert summarise(parse_log_text("\n".join(rerun)), Window(), 4).step_time_s == pytest.approx(75.05)
    later = _lines(args, dict(enumerate(TIMES, start=1)), total=20) + _lines(args, {11: 3e5, 12: 75000.0}, total=20)
    assert summarise(parse_log_text("\n".join(later)), Window(3, 10), 4).ok  # the restart is after the window


def test_a_missing_or_garbled_line_in_the_window_marks_the_row(args):
    text = megatron_log(args, TIMES, [130.0] * 10)
    garbled = _edit(text, 6, "(ms): 75100.0 |", "(ms): 75[rank3]: UserWarning: x")
    assert 6 not in parse_log_text(garbled).iterations
    line = 1 + next(k for k, text_line in enumerate(garbled.splitlines()) if "iteration        6/" in text_line)
    assert _status(garbled) == f"no line for iteration 6 of the window 3-10 (the line of iteration 6 is cut: line {line})"
    nan_time = _edit(text, 6, "(ms): 75100.0 |", "(ms): nan |")
    assert _status(nan_time) == "elapsed time per iteration nan ms at iteration 6"
    last_missing = "\n".join(_lines(args, {i: 75000.0 for i in range(1, 13) if i != 10}, total=12))
    assert _status(last_missing) == "no line for iteration 10 of the window 3-10 (missing or cut)"
    resumed = "\n".join(_lines(args, {5: 300000.0, 6: 75000.0, 7: 75000.0, 8: 75000.0, 9: 75000.0, 10: 75000.0}))
    assert _status(resumed) == "no line for iterations 3-4 of the window 3-10 (this start of the program begins at 5)"


def test_lines_averaging_iterations_before_the_window_mark_the_row(args):
    """Megatron's line is the mean over its log interval, and the first iteration's timer is not reset."""
    every_5 = {**args, "log_interval": 5}
    steady = (225000.0 + 112000.0 + 3 * 75000.0) / 5
    text = "\n".join(_lines(every_5, {1: 225000.0, 5: steady, 10: 75000.0}))
    assert _status(text) == ("the line of iteration 5 averages iterations 1-5, which begin before the window 3-10 "
                             "(log interval 5); give --window 6-10, which leaves out the warm-up, or rerun with "
                             "--log-interval 1 for a line per iteration")
    row = summarise(parse_log_text(text), Window(6, 10), 4)
    assert row.ok and row.step_time_s == pytest.approx(75.0)
    assert _status(megatron_log(args, TIMES, [130.0] * 10), Window(2, 10)).startswith(
        "the line of iteration 2 averages iterations 1-2, which begin before the window 2-10 (log interval 1); "
        "give --window 3-10, which leaves out the warm-up")
    row = summarise(parse_log_text(megatron_log(args, TIMES, [130.0] * 10)), Window(1, 10), 4)  # line 2: 1-2 alone
    assert row.ok and row.step_time_s == pytest.approx(75.15)  # median of 10 iterations, 1 and 2 at line 2's time
    assert [interval_start(i, 1, 1) for i in (1, 2, 3)] == [1, 1, 3]
    assert [interval_start(i, 7, 5) for i in (7, 10, 15)] == [7, 7, 11]
    assert _status("\n".join(_lines({**args, "log_interval": None}, dict(enumerate(TIMES, start=1))))) == \
        "arguments block lacks log_interval"


def test_zero_and_non_finite_numbers_mark_the_row(args):
    assert _status(megatron_log(args, [0.0] * 10, [0.0] * 10)) == "elapsed time per iteration 0.0 ms at iteration 3"
    text = megatron_log(args, TIMES, [130.0] * 10)
    assert _status(_edit(text, 7, "(TFLOP/s/GPU): 130.0 |", "(TFLOP/s/GPU): inf |")) == \
        "Megatron TFLOP/s/GPU inf at iteration 7"
    assert _status(_edit(text, 7, "(TFLOP/s/GPU): 130.0 |", "(TFLOP/s/GPU): 13[rank1]0.0 |")) == \
        "Megatron TFLOP/s/GPU is missing from some lines of the window 3-10"
    assert _status(megatron_log({**args, "world_size": 0}, TIMES, [130.0] * 10)) == \
        "arguments block lacks a positive world_size, seq_length or global_batch_size"


def test_a_batch_size_change_in_the_window_marks_the_row(args):
    text = megatron_log(args, TIMES, [130.0] * 10)
    for iteration in (3, 4, 5, 6):
        text = _edit(text, iteration, "global batch size:  4096", "global batch size:  2048")
    assert _status(text) == "global batch size changes in the window 3-10 (2048, 4096): batch-size ramp-up?"
    assert summarise(parse_log_text(text), Window(7, 10), 4).global_batch_size == 4096


def test_peak_tflops_option_is_checked(args, tmp_path, capsys):
    log = tmp_path / "8n.log"
    log.write_text(megatron_log(args, TIMES, [130.0] * 10))
    for peak in ("0", "-5", "nan"):
        assert main(["table", str(log), "--peak-tflops", peak]) == 2
        assert "--peak-tflops must be a positive number" in capsys.readouterr().err


def test_a_cut_first_line_still_marks_where_the_run_starts(args):
    """The first line of a run averages only itself; cutting it must not make the next line look like a start."""
    text = _edit(megatron_log(args, TIMES, [130.0] * 10), 1, "elapsed time per iteration (ms): 225000.0 |",
                 "elapsed time per iteration (ms): 2250")
    log = parse_log_text(text)
    assert 1 not in log.iterations and [run.start for run in log.runs] == [1]
    row = summarise(log, Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(75.05)


def test_a_window_ending_between_log_lines_marks_the_row(args):
    """log interval 4 over 12 iterations: lines at 1, 4, 8 and 12, so a 5-10 window has no line ending at 10."""
    every_4 = {**args, "log_interval": 4, "train_iters": 12}
    text = "\n".join(_lines(every_4, {1: 225000.0, 4: 100000.0, 8: 75000.0, 12: 75000.0}, total=12))
    assert _status(text, Window(5, 10)) == (
        "the window 5-10 ends between log lines: the last line in it averages up to iteration 8, the next one "
        "reaches 12 (log interval 4); end the window on a logged iteration")
    assert summarise(parse_log_text(text), Window(5, 12), 4).ok


def test_a_finished_run_whose_last_iterations_were_not_logged_is_not_called_truncated(args):
    """train_iters 10 with log interval 4: lines at 1, 4 and 8; megatron's end-of-training line tells a finished run
    from one that stopped at iteration 8."""
    every_4 = {**args, "log_interval": 4, "train_iters": 10}
    stopped = "\n".join(_lines(every_4, {1: 225000.0, 4: 100000.0, 8: 75000.0}, total=10))
    done = stopped + "\n[after training is done] datetime: 2026-11-30 12:00:00.000000 "
    assert _status(stopped, Window(5, 10)) == "truncated at iteration 8/10"
    assert parse_log_text(done).runs[-1].finished and not parse_log_text(stopped).runs[-1].finished
    assert _status(done, Window(5, 10)) == ("iterations 9-10 of the window 5-10 are in no log line (the run ended "
                                            "between lines, log interval 4); end the window at 8")
    assert summarise(parse_log_text(done), Window(5, 8), 4).ok
    whole = megatron_log(args, TIMES, [130.0] * 10) + "\n[after training is done] datetime: 2026-11-30 12:00:00.000000 "
    assert summarise(parse_log_text(whole), Window(), 4).ok


DONE = "[after training is done] datetime: 2026-10-19 12:00:00"


def test_each_run_of_an_appended_log_is_read_with_its_own_arguments(args):
    """Two jobs in one file: the 8-node run's window must not take the 16-node run's world size (the table said 16
    nodes and half the tokens/s)."""
    bigger = resized(args, 64)
    cancelled = "slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 DUE TO TIME LIMIT ***"
    text = "\n".join(_lines(args, dict(enumerate(TIMES, start=1))) + [DONE]
                     + _lines(bigger, {1: 200000.0, 2: 100000.0}) + [cancelled])
    log = parse_log_text(text)
    assert [run.args["world_size"] for run in log.runs] == [32, 64]
    assert [run.failure for run in log.runs] == ["", "cancelled (time limit)"]
    row = summarise(log, Window(), 4)
    assert row.ok and (row.nodes, row.gpus) == (8, 32)
    assert row.tokens_per_s_per_gpu == pytest.approx(4096 * 4096 / 75.05 / 32)
    assert summarise(log, Window(1, 3), 4).status.startswith("cancelled (time limit) at iteration 2; an earlier start")


def test_a_restart_without_an_arguments_block_keeps_the_previous_arguments(args):
    text = "\n".join(_lines(args, {1: 225000.0, 2: 112000.0}) + _lines(args, dict(enumerate(TIMES, 1)), block=False))
    log = parse_log_text(text)
    assert len(log.runs) == 2 and log.runs[1].args == log.runs[0].args and log.runs[1].args_complete
    assert summarise(log, Window(), 4).ok


def test_a_failed_attempt_before_a_clean_requeue_does_not_mark_the_row(args):
    """The requeued job ran 1-10 cleanly; the row said 'out of memory at iteration 10' from the first attempt."""
    oom = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    first = _lines(args, {1: 225000.0, 2: 112000.0}) + [oom]
    clean = "\n".join(first + _lines(args, dict(enumerate(TIMES, start=1))) + [DONE])
    log = parse_log_text(clean)
    assert [run.failure for run in log.runs] == ["out of memory", ""]
    assert summarise(log, Window(), 4).ok
    failed_again = "\n".join(first + _lines(args, dict(enumerate(TIMES[:5], start=1))) + [oom])
    assert _status(failed_again) == "out of memory at iteration 5"


@pytest.mark.parametrize("tail, status", [
    ("[rank3]:terminate called after throwing an instance of 'c10::DistBackendError'\n[rank3]:  what():  NCCL "
     "error: unhandled cuda error\n[rank3]:Fatal Python error: Aborted\nsrun: error: as01r1b01: task 3: Aborted "
     "(core dumped)", "crashed (C++ exception c10::DistBackendError)"),
    ("Fatal Python error: Segmentation fault\n", "crashed (Fatal Python error: Segmentation fault)"),
    ("/var/spool/slurmd/job1234/slurm_script: line 9: 4242 Segmentation fault (core dumped) python train.py",
     "crashed (segmentation fault)"),
    ("[rank1]: NCCL error in: ProcessGroupNCCL.cpp:1234, unhandled system error", "NCCL error"),
    ("srun: error: as01r1b01: task 3: Exited with exit code 1", "task 3 exited with exit code 1 (srun)"),
    ("srun: error: as01r1b01: tasks 0-3: Killed", "tasks 0-3 killed (srun)"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed.\n"
     "[rank5]:[E ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
     "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.\n"
     "srun: error: as01r1b01: task 3: Out Of Memory", "host out of memory (OOM killer)"),
    ("slurmstepd: error: Detected 1 oom-kill event(s) in step 1234.0 cgroup. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "host out of memory (OOM killer)"),
    ("srun: error: as01r1b01: task 3: Out Of Memory", "task 3 out of memory (srun)"),
    ("srun: error: as01r1b01: tasks 4-7: Bus error (core dumped)", "tasks 4-7 bus error (srun)"),
])
def test_crashes_without_a_python_traceback_mark_the_row(args, tail, status):
    """A run that dies after the window without a traceback was shown plain ok (with one it says 'crashed'): the
    row keeps the window's numbers and names the failure."""
    text = "\n".join(_lines(args, dict(enumerate(TIMES + [75000.0, 75000.0], start=1)), total=20)) + "\n" + tail
    assert _status(text) == f"ok ({status} at iteration 12, after the window)"


def test_a_task_that_exited_cleanly_is_no_failure(args):
    text = megatron_log(args, TIMES, [130.0] * 10, tail="srun: error: as01r1b01: task 0: Exited with exit code 0\n")
    assert _status(text) == "ok"


def test_a_resume_that_repeats_the_last_logged_iteration_is_a_restart(args):
    """A requeued job resumed from a checkpoint can print the iteration the killed run printed last: that line is the
    resumed process's slow first step, not a steady one, so the window spans a restart."""
    first = _lines(args, dict(enumerate(TIMES[:7], start=1)))
    resumed = first + _lines(args, {7: 300000.0, 8: 75000.0, 9: 75000.0, 10: 75000.0}, block=False)
    log = parse_log_text("\n".join(resumed))
    assert [run.start for run in log.runs] == [1, 7] and log.iterations[7].run == 1
    assert _status("\n".join(resumed)) == ("the window 3-10 spans a restart: its lines come from 2 starts of the "
                                          "program; e.g. --window 9-10, the last start's lines after its warm-up")


def test_iteration_lines_after_the_end_of_training_line_unmark_the_run_finished(args):
    """``finished`` means megatron's end-of-training line follows the run's last iteration line; lines printed after
    it (a resume appended without an arguments block) make the run unfinished again."""
    text = "\n".join(_lines(args, dict(enumerate(TIMES, start=1))) + [DONE]
                     + _lines(args, {11: 75000.0, 12: 75000.0}, total=20, block=False))
    log = parse_log_text(text)
    assert len(log.runs) == 1 and log.runs[0].last_iteration == 12 and not log.runs[0].finished
    assert parse_log_text(text + "\n" + DONE).runs[0].finished


def test_a_failed_attempt_without_iterations_before_a_requeue_does_not_mark_the_row(args):
    """A job that ran out of memory while building the model (an arguments block, no iteration line), then a clean
    requeue appending its own block: the failure belongs to the first start of the program only."""
    oom = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    text = "\n".join(args_block(args) + [oom] + _lines(args, dict(enumerate(TIMES, start=1))) + [DONE])
    log = parse_log_text(text)
    assert [run.failure for run in log.runs] == ["out of memory", ""] and [run.start for run in log.runs] == [None, 1]
    assert _status(text) == "ok"


@pytest.mark.parametrize("error", ["RuntimeError: CUDA error: out of memory",
                                   "torch.OutOfMemoryError: Tried to allocate 2.00 GiB"])
def test_every_form_of_out_of_memory_is_reported_as_such(args, error):
    """An OOM raised as a CUDA error (or without torch's usual wording) is an OOM, not a generic crash."""
    tail = f"[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", line 9\n[rank0]: {error}\n"
    text = megatron_log(args, TIMES[:4], [130.0] * 4, tail=tail)
    assert _status(text) == "out of memory at iteration 4"


def test_a_chained_exception_is_reported_by_the_exception_raised_last(args):
    """Python prints the original traceback first and the one that ended the program last."""
    tail = ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'layers.0'\n\nDuring handling of the "
            "above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"b.py\", "
            "line 2\nRuntimeError: checkpoint has no layer 0\n")
    text = megatron_log(args, TIMES[:4], [130.0] * 4, tail=tail)
    assert _status(text) == "crashed (RuntimeError: checkpoint has no layer 0) at iteration 4"


@pytest.mark.parametrize("prefix", ["", "[rank0]: ", "3: "])
@pytest.mark.parametrize("name", ["AssertionError", "KeyboardInterrupt", "torch.OutOfMemoryError"])
def test_an_exception_without_a_message_is_named(args, prefix, name):
    """Python prints a bare ``Name`` for an exception raised without a message (a bare ``assert``, Ctrl-C): the row
    names it as it does ``Name: message``."""
    tail = "".join(f"{prefix}{line}\n" for line in
                   ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', "    assert ok", name])
    text = megatron_log(args, TIMES[:4], [130.0] * 4, tail=tail)
    expected = "out of memory" if "OutOfMemory" in name else f"crashed ({name})"
    assert _status(text) == f"{expected} at iteration 4"


def _traceback(message: str) -> str:
    """A main-thread traceback ending in ``message``."""
    return "\n".join(["Traceback (most recent call last):", '  File "/opt/venv/train.py", line 7, in <module>',
                      "    main()", message])


def test_a_crash_message_is_shortened_only_past_80_characters():
    name = random.choice(["ValueError", "RuntimeError", "torch.OutOfMemoryError"]) + ": "
    exact = name + "".join(random.choices(string.ascii_letters + " ", k=80 - len(name) - 1)) + "x"
    assert len(exact) == 80 and last_exception(_traceback(exact)) == exact
    longer = exact + random.choice(string.ascii_letters)
    assert last_exception(_traceback(longer)) == longer[:77] + "..."
