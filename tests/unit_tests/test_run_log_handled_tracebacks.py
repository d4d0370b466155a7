"""``oellm table`` on runs that printed a failure marker and went on: a handled traceback (W&B's network thread, a
``logging.exception``, a retried read) is no crash when training is seen to continue after it; a marker after the
last iteration line, or followed by a single line only, still marks the row. Logs in megatron-core 0.19.2's
formats (``srun --label`` prefixes, the last rank printing the iteration lines), fresh random step times."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

LAST = 31
"""The last rank of the 8-node row (32 GPUs): it prints megatron's iteration lines and runs W&B."""

WANDB_THREAD = """\
{p}Exception in thread NetStatThr:
{p}Traceback (most recent call last):
{p}  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
{p}    self.run()
{p}  File "/usr/lib/python3.11/threading.py", line 982, in run
{p}    self._target(*self._args, **self._kwargs)
{p}  File "/opt/venv/lib/python3.11/site-packages/wandb/sdk/wandb_run.py", line 268, in check_network_status
{p}    self._loop_check_status(
{p}  File "/opt/venv/lib/python3.11/site-packages/wandb/sdk/lib/mailbox.py", line 283, in wait
{p}    raise MailboxError("transport failed")
{p}wandb.sdk.lib.mailbox.MailboxError: transport failed"""
"""W&B's network-status thread dying on a dropped connection: Python prints the thread's traceback, training goes
on."""

LOGGED = """\
{p}ERROR:megatron.core.datasets.indexed_dataset:read of /gpfs/data/fineweb_text_document.bin failed, retrying
{p}Traceback (most recent call last):
{p}  File "/opt/venv/lib/python3.11/site-packages/megatron/core/datasets/indexed_dataset.py", line 601, in read
{p}    return numpy.frombuffer(self.bin_buffer, dtype=self.dtype, count=length, offset=offset)
{p}OSError: [Errno 5] Input/output error"""
"""A ``logging.exception`` of an error the caller handled (a retried read on a flaky parallel file system)."""

RETRIED = """\
{p}WARNING:oellm_data.retry:reading sample 1048576 failed, retrying in 5 s
{p}Traceback (most recent call last):
{p}  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 52, in fetch
{p}    data = [self.dataset[idx] for idx in possibly_batched_index]
{p}TimeoutError: [Errno 110] Connection timed out"""
"""A dataset wrapper's logged and retried read in the main process."""

DONE = "{p}[after training is done] datetime: 2026-10-19 12:10:00.000000 "
SAVE_CRASH = """\
{p}Traceback (most recent call last):
{p}  File "/opt/venv/lib/python3.11/site-packages/megatron/training/checkpointing.py", line 512, in save_checkpoint
{p}    torch.save(state_dict, checkpoint_name)
{p}OSError: [Errno 122] Disk quota exceeded"""
"""The final checkpoint save (after ``[after training is done]``) failing: the run did not end well."""

OOM = """\
{p}Traceback (most recent call last):
{p}  File "/opt/venv/lib/python3.11/site-packages/megatron/core/transformer/moe/experts.py", line 301, in forward
{p}    intermediate = self.linear_fc1(permuted)
{p}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"""

MARKERS = [
    OOM,
    "{p}[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=912, "
    "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
    LOGGED,
    RETRIED,
    "{p}terminate called after throwing an instance of 'c10::DistBackendError'",
    "{p}Fatal Python error: Segmentation fault",
    "{p}/var/spool/slurmd/job1234/slurm_script: line 9: 4242 Segmentation fault (core dumped) python train.py",
    "{p}NCCL error in: ProcessGroupNCCL.cpp:1234, unhandled system error",
    "slurmstepd: error: *** STEP 1234.0 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 ***",
    "srun: error: as01r1b01: task 0: Exited with exit code 1",
    "slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed.",
]
"""One of each kind of :data:`megatron.oellm.run_log.FAILURE_MARKERS`."""


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _text(args: dict, times: list[float], inserts: dict[int, str], total: int = 10, tail: str = "") -> str:
    """A ``srun --label`` log: the arguments block, the lines of iterations 1..len(times), each of ``inserts``
    printed after the line of its iteration (0: before the first line), then ``tail``."""
    prefix = f"{LAST}: "
    lines = [prefix + line for line in args_block(args)]
    lines += [inserts[0].format(p="0: ")] if 0 in inserts else []
    for i, ms in enumerate(times, start=1):
        lines.append(prefix + iteration_line(i, total, args["global_batch_size"], ms, 130.0))
        if i in inserts:
            lines.append(inserts[i].format(p=random.choice([prefix, "0: ", "7: "])))
    return "\n".join(lines + ([tail.format(p="0: ")] if tail else []))


@pytest.mark.parametrize("after", [0, 1, 4, 8, 9])
@pytest.mark.parametrize("handled", [LOGGED, RETRIED, WANDB_THREAD])
def test_a_handled_traceback_training_went_on_after_is_no_crash(args, after, handled):
    """A finished run whose W&B thread or a logger printed a traceback on the way was 'crashed' with no numbers."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    log = parse_log_text(_text(args, times, {after: handled}, tail=DONE))
    assert log.runs[-1].failure == ""
    row = summarise(log, Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)


def test_a_traceback_after_the_last_iteration_line_is_a_crash(args):
    """The final checkpoint save failing after megatron's end-of-training line: the run did not end well (the row
    keeps the window's numbers: the failure came after its last line)."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    text = _text(args, times, {4: WANDB_THREAD}, tail=DONE + "\n" + SAVE_CRASH)
    assert summarise(parse_log_text(text), Window(), 4).status == \
        "ok (crashed (OSError: [Errno 122] Disk quota exceeded) at iteration 10, after the window)"
    unfinished = _text(args, times, {10: LOGGED}, total=20)
    assert summarise(parse_log_text(unfinished), Window(), 4).status == \
        "ok (crashed (OSError: [Errno 5] Input/output error) at iteration 10, after the window)"


@pytest.mark.parametrize("marker", MARKERS)
def test_a_marker_followed_by_one_line_only_still_counts(args, marker):
    """With pipeline parallelism the last stage may print iteration 12's line after the first stage died in
    iteration 13: one line after a marker is no proof that training went on, nor is megatron's signal handler's
    ``Termination requested`` (printed on the SIGTERM srun sends when a task died)."""
    times = random_times(12, random.uniform(60_000.0, 90_000.0))
    terminated = "{p}Termination requested. Performing orderly shutdown."
    for tail in ("", terminated):
        log = parse_log_text(_text(args, times, {11: marker}, total=20, tail=tail))
        assert log.runs[-1].failure, tail
        assert summarise(log, Window(3, 13), 4).status.endswith(" at iteration 12")
    expected = parse_log_text(_text(args, times[:11], {11: marker}, total=20)).runs[-1].failure
    assert parse_log_text(_text(args, times, {11: marker}, total=20)).runs[-1].failure == expected


@pytest.mark.parametrize("marker", MARKERS)
def test_a_marker_training_went_on_after_is_no_failure(args, marker):
    """Two iteration lines after a marker (or one and megatron's end-of-training line, printed after a barrier of
    every rank) show that every rank went on: e.g. an srun step or a traceback of a preflight command before
    training, or an error some library handled."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    for inserts in ({0: marker}, {random.randrange(1, 9): marker}, {9: marker}):
        text = _text(args, times, inserts, tail=DONE)
        assert summarise(parse_log_text(text), Window(), 4).ok, inserts
    assert parse_log_text(_text(args, times, {9: marker})).runs[-1].failure  # no end line after the single line


def test_a_handled_traceback_before_an_early_exit_is_no_crash(args):
    """``--exit-interval 5``: megatron's exit line (after a barrier) follows the line after the traceback."""
    times = random_times(5, random.uniform(60_000.0, 90_000.0))
    exit_args = {**args, "exit_interval": 5}
    text = _text(exit_args, times, {4: WANDB_THREAD}, tail="{p}[exiting program at iteration 5] datetime: "
                 "2026-10-19 12:10:00.000000 ")
    assert summarise(parse_log_text(text), Window(), 4).status == "exited at iteration 5/10 (--exit-interval 5)"


def test_an_ignored_exception_interleaved_with_the_last_line_is_no_crash(args):
    """Python's ``Exception ignored`` header before the last iteration line and its traceback after it (another
    rank printing in between): still an ignored exception, not a crash."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    text = _text(args, times, {}, tail=DONE).split("\n")
    last = next(k for k, line in enumerate(text) if "iteration       10/" in line)
    text[last:last] = ["7: Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1e8ca0>"]
    text[last + 2:last + 2] = ["7: Traceback (most recent call last):",
                               '7:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", '
                               "line 1479, in __del__",
                               "7: AssertionError: can only test a child process"]
    row = summarise(parse_log_text("\n".join(text)), Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)


def test_a_threads_traceback_after_the_last_line_is_no_crash(args):
    """W&B's thread dying at shutdown, after megatron's end-of-training line: the program outlives a thread's exception
    (``Exception in thread ...``), so the finished run keeps its numbers and a plain ``ok`` (no ``crashed`` note); a
    main-thread traceback there still counts."""
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    row = summarise(parse_log_text(_text(args, times, {}, tail=DONE + "\n" + WANDB_THREAD)), Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[2:]) / 1000, rel=1e-12)
    assert row.status == "ok"
    thread_then_crash = DONE + "\n" + WANDB_THREAD + "\n" + SAVE_CRASH
    assert summarise(parse_log_text(_text(args, times, {}, tail=thread_then_crash)), Window(), 4).status == \
        "ok (crashed (OSError: [Errno 122] Disk quota exceeded) at iteration 10, after the window)"


IN_PROGRESS_ARGS = {"train_iters": 10, "log_interval": 1, "global_batch_size": 64, "seq_length": 4096,
                    "world_size": 8}


def _in_progress(handled: str, lines: int) -> str:
    """A run that printed ``handled`` (a logged traceback it went on after) before its first of ``lines`` iteration lines,
    then stopped printing (still running, or cut off) with no end line."""
    text = [*args_block(IN_PROGRESS_ARGS), handled.format(p="")]
    text += [iteration_line(i, 10, 64, round(random.uniform(60_000.0, 90_000.0), 1), 130.0)
             for i in range(1, lines + 1)]
    return "\n".join(text)


@pytest.mark.parametrize("handled", [LOGGED, RETRIED])
def test_the_runs_only_two_lines_after_a_traceback_show_training_went_on(handled):
    """``oellm table`` on a job in progress: a traceback at start-up that training went on after, then the first two
    iteration lines. Two lines are proof (the rule of every later pair), so the row says truncated, not crashed; one
    line alone is not."""
    run = parse_log_text(_in_progress(handled, 2)).runs[-1]
    assert run.failure == ""
    assert summarise(parse_log_text(_in_progress(handled, 2)), Window(), 4).status == "truncated at iteration 2/10"
    assert parse_log_text(_in_progress(handled, 1)).runs[-1].failure.startswith("crashed (")
