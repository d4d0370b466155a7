"""``oellm table`` on the log shapes of this project's own SLURM jobs (one ``srun`` task per node running torchrun,
so the ranks of a node share one output stream and one ``srun --label`` prefix, or none) and on SLURM's own
messages of a step it killed. Fresh random step times."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, ignored_at_shutdown, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: 2026-10-19 12:10:00.000000 "


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _text(args: dict, times: list[float], total: int, prefix: str = "", tail: list[str] = ()) -> str:
    """The arguments block and the lines of iterations 1..len(times) (every line with ``prefix``), then ``tail``."""
    lines = args_block(args) + [iteration_line(i, total, args["global_batch_size"], ms, 130.0)
                                for i, ms in enumerate(times, start=1)]
    return "\n".join([prefix + line for line in lines] + list(tail))


def _line_by_line(reports: list[list[str]]) -> list[str]:
    """``reports`` as ranks sharing one stream reach the log when they print at once: Python writes each line of a
    report on its own (stderr is line-buffered), so the ranks' lines alternate."""
    return [line for lines in zip(*reports, strict=True) for line in lines]


def _shuffled(reports: list[list[str]]) -> list[str]:
    """``reports`` interleaved at random, line by line, each report's own order kept."""
    rest, out = [list(report) for report in reports], []
    while any(rest):
        out.append(random.choice([report for report in rest if report]).pop(0))
    return out


@pytest.mark.parametrize("prefix", ["", "3: "])
def test_ignored_exceptions_of_ranks_of_one_node_printed_together_are_no_crash(args, prefix):
    """The project's job runs one srun task per node, torchrun starting the node's four ranks on that task's
    stream: at shutdown their DataLoaders' ignored exceptions interleave line by line under one prefix (none, or
    the node's ``srun --label``). A rank's ``Traceback`` then follows another rank's header, not its own, and the
    finished run was 'crashed (AssertionError: can only test a child process)' with no numbers."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    reports = [ignored_at_shutdown(prefix) for _ in range(random.randint(2, 4))]
    first, second = ignored_at_shutdown(prefix), ignored_at_shutdown(prefix)
    ends_first = [first[0], second[0], *first[1:], *second[1:]]  # one report ends before the other's traceback
    header_late = [*first[:2], second[0], *first[2:], *second[1:]]  # a header after the other's traceback
    for shutdown in (_line_by_line(reports), _shuffled(reports), ends_first, header_late):
        log = parse_log_text(_text(args, times, 10, prefix, [prefix + DONE, *shutdown]))
        assert log.runs[-1].failure == ""
        row = summarise(log, Window(), 4)
        assert row.ok, row.status
        assert row.step_time_s == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)


@pytest.mark.parametrize("prefix", ["", "3: "])
def test_a_crash_among_ignored_exceptions_of_one_node_still_counts(args, prefix):
    """A rank's real crash printed while its node's other ranks report ignored exceptions is still a crash: it has no
    ``Exception ignored`` header of its own. Ordinary output of the node between a header and the traceback still
    ends the header (as before: only other exception reports may come between)."""
    times = random_times(12, random.uniform(60_000.0, 90_000.0))
    crash = [f"{prefix}Traceback (most recent call last):", f'{prefix}  File "train.py", line 9, in <module>',
             f"{prefix}RuntimeError: boom"]
    reports = [ignored_at_shutdown(prefix) for _ in range(random.randint(1, 3))]
    for shutdown in (_line_by_line([*reports, crash + [f"{prefix}"] * 2]), _shuffled([*reports, crash])):
        log = parse_log_text(_text(args, times, 20, prefix, shutdown))
        assert log.runs[-1].failure.startswith("crashed"), shutdown
        assert summarise(log, Window(), 4).status.endswith(" at iteration 12, after the window)")
    header = ignored_at_shutdown(prefix)[0]
    ordinary = [header, f"{prefix}INFO:megatron.core.utils:saving the last samples", *crash]
    assert parse_log_text(_text(args, times, 20, prefix, ordinary)).runs[-1].failure == "crashed (RuntimeError: boom)"
    without_traceback = [f"{prefix}Exception ignored in: <_io.TextIOWrapper name='<stdout>' mode='w' encoding='utf-8'>",
                         f"{prefix}BrokenPipeError: [Errno 32] Broken pipe", *crash]  # ended by its exception line
    assert parse_log_text(_text(args, times, 20, prefix, without_traceback)).runs[-1].failure == \
        "crashed (RuntimeError: boom)"


@pytest.mark.parametrize("message, status", [
    ("slurmstepd: error: *** STEP 1234.0 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 DUE TO NODE FAILURE, SEE "
     "SLURMCTLD LOG FOR DETAILS ***", "cancelled (node failure)"),
    ("slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 DUE TO NODE FAILURE, SEE "
     "SLURMCTLD LOG FOR DETAILS ***", "cancelled (node failure)"),
    ("[2026-10-19T13:00:00.123] error: *** STEP 1234.0 ON as01r1b01 UNCORRECTABLE MEMORY ERROR AT "
     "2026-10-19T13:00:00 ***", "cancelled (uncorrectable memory error)"),
    ("slurmstepd: error: *** JOB 1234 ON as01r1b01 FAILED (non-zero exit code or other failure mode) ***",
     "failed (SLURM: non-zero exit code or other failure mode)"),
    ("slurmstepd: error: StepId=1234.0 exceeded memory limit (541165879296 > 536870912000), being killed",
     "host out of memory (SLURM memory limit)"),
    ("slurmstepd: error: Job 1234 exceeded virtual memory limit (541165879296 > 536870912000), being killed",
     "host out of memory (SLURM memory limit)"),
])
def test_slurms_messages_of_a_step_it_killed_mark_the_row(args, message, status):
    """slurmstepd's messages (``src/slurmd/slurmstepd/req.c``, ``jobacct_gather``) of a step it ended for a failed
    node, an uncorrectable memory error, a job failure or the memory limit of its accounting: the run's row was
    'ok' (the window was before the kill) or 'truncated', whereas a time-limit cancellation said 'cancelled'."""
    times = random_times(12, random.uniform(60_000.0, 90_000.0))
    tail = ["srun: error: Node failure on as01r1b05",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", message]
    assert summarise(parse_log_text(_text(args, times, 20, tail=tail)), Window(), 4).status == \
        f"ok ({status} at iteration 12, after the window)"


def test_slurms_benign_memory_note_is_no_failure(args):
    """cgroup's note that a step touched its memory limit at some point (page cache counts) kills nothing."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    tail = [DONE, "slurmstepd: error: Exceeded step memory limit at some point."]
    assert summarise(parse_log_text(_text(args, times, 10, tail=tail)), Window(), 4).ok


TORCHRUN_SIGNAL = """\
W1019 13:00:00.512000 111 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
W1019 13:00:00.513000 111 torch/distributed/elastic/multiprocessing/api.py:1029] Sending process 2220 closing signal SIGTERM
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 357, in wrapper
    return f(*args, **kwargs)
  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 111 got signal: 15"""
"""What torchrun (the agent of one node, started by the job's ``srun`` task) prints when SLURM or srun sends it
SIGTERM: its own traceback, the consequence of a signal, not a failure of the training."""

TORCHRUN_CHILD_FAILED = """\
E1019 13:00:00.345000 111 torch/distributed/elastic/multiprocessing/api.py:1003] failed (exitcode: 1) local_rank: 3 (pid: 2223) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
============================================================
megatron.oellm.training FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-10-19_13:00:00
  host      : as01r1b02
  rank      : 7 (local_rank: 3)
  exitcode  : 1 (pid: 2223)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""
"""What torchrun prints after a rank it started failed (the rank's own output shows why)."""

RANK_CRASH = """\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/megatron/core/transformer/moe/token_dispatcher.py", line 512, in dispatch
    raise RuntimeError("expert capacity exceeded on rank 7")
RuntimeError: expert capacity exceeded on rank 7"""


def test_torchruns_own_tracebacks_do_not_hide_why_the_job_ended(args):
    """The project's job starts torchrun on every node; torchrun ends with a traceback of its own whenever the job
    ends badly: ``SignalException`` when SLURM's time limit (or srun) sends it SIGTERM, ``ChildFailedError`` when a
    rank failed. Being the log's last traceback, it was the row's status: a time-limit cancellation read 'crashed
    (torch.distributed.elastic.multiprocessing.api.SignalException: Process 111 got signal: 15)' and a rank's
    RuntimeError read as torchrun's ChildFailedError or SignalException."""
    times = random_times(12, random.uniform(60_000.0, 90_000.0))
    cancelled = "slurmstepd: error: *** STEP 1234.0 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 DUE TO TIME LIMIT ***"
    other_node = TORCHRUN_SIGNAL.replace(" 111 ", " 112 ").replace("Process 111", "Process 112")
    timed_out = [cancelled, TORCHRUN_SIGNAL, other_node]
    assert summarise(parse_log_text(_text(args, times, 20, tail=timed_out)), Window(3, 13), 4).status == \
        "cancelled (time limit) at iteration 12"
    crashed = [RANK_CRASH, TORCHRUN_CHILD_FAILED, "srun: error: as01r1b02: task 1: Exited with exit code 1",
               TORCHRUN_SIGNAL]
    assert summarise(parse_log_text(_text(args, times, 20, tail=crashed)), Window(), 4).status == \
        "ok (crashed (RuntimeError: expert capacity exceeded on rank 7) at iteration 12, after the window)"


def test_torchruns_traceback_alone_still_marks_the_row(args):
    """With no other sign of the failure, torchrun's own traceback still says the job did not end well."""
    times = random_times(12, random.uniform(60_000.0, 90_000.0))
    status = summarise(parse_log_text(_text(args, times, 20, tail=[TORCHRUN_CHILD_FAILED])), Window(), 4).status
    assert status == ("ok (crashed (torch.distributed.elastic.multiprocessing.errors.ChildFailedError) at iteration "
                      "12, after the window)")
    status = summarise(parse_log_text(_text(args, times, 20, tail=[TORCHRUN_SIGNAL])), Window(), 4).status
    assert status.startswith("ok (crashed (torch.distributed.elastic.multiprocessing.api.SignalException: Process 111")
    assert status.endswith(" at iteration 12, after the window)")


DATALOADER_SIGTERM = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Terminated. """


def test_a_data_loader_worker_ended_by_the_jobs_sigterm_does_not_hide_the_cancellation(args):
    """SLURM's SIGTERM at the time limit reaches a rank's data-loader workers too; the rank then raises 'DataLoader
    worker (pid N) is killed by signal: Terminated.', which read as the row's crash instead of the time limit. Alone
    (no SLURM line) it still marks the row; a worker killed by another signal is a crash of its own."""
    times = random_times(12, random.uniform(60_000.0, 90_000.0))
    worker = DATALOADER_SIGTERM.format(pid=random.randint(1000, 99999))
    cancelled = "slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 DUE TO TIME LIMIT ***"
    assert summarise(parse_log_text(_text(args, times, 20, tail=[worker, cancelled, TORCHRUN_SIGNAL])),
                     Window(3, 13), 4).status == "cancelled (time limit) at iteration 12"
    alone = summarise(parse_log_text(_text(args, times, 20, tail=[worker])), Window(), 4).status
    assert alone.startswith("ok (crashed (RuntimeError: DataLoader worker (pid ")
    assert alone.endswith(" at iteration 12, after the window)")
    killed = worker.replace("Terminated", "Killed")
    status = summarise(parse_log_text(_text(args, times, 20, tail=[killed, cancelled])), Window(), 4).status
    assert status.startswith("ok (crashed (RuntimeError: DataLoader worker") and "Killed" in status
