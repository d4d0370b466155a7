"""Line numbers in ``oellm table``'s statuses count lines as ``wc -l``, ``grep -n`` and ``head -n`` do: a line ends
at ``\\n`` only. A progress bar's lone ``\\r`` (or a form feed, ``\\x85``, U+2028) counted as a line break, so
``head -n N`` overshot the earlier start and ``line 824`` disagreed with ``grep -n``'s 822. CRLF line ends still
parse as before. Fresh random progress bars, control characters and step times."""

from __future__ import annotations

import random
import subprocess

import pytest

from megatron.oellm.run_log import parse_log_text, read_log
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "
TIME_LIMIT = "slurmstepd: error: *** JOB 1234 ON gs01r1b01 CANCELLED AT 2026-11-30T12:00:00 DUE TO TIME LIMIT ***"
BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
"""Characters ``str.splitlines`` breaks a line at and ``wc -l`` does not."""


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 10 iterations asked for."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 10})


def _start(args: dict, last: int) -> list[str]:
    """One start of the program: the arguments block, a progress bar redrawn with a random line-break-like character
    between its states, then iteration lines 1..``last`` (fresh random times)."""
    states = random.randint(20, 400)
    bar = random.choice(BREAKS).join(f"building index: {k:4d}/{states}" for k in range(1, states + 1))
    times = random_times(last, random.uniform(60_000.0, 90_000.0))
    return [*args_block(args), "> building datasets ...", bar,
            *(iteration_line(i, 10, args["global_batch_size"], ms, 130.0) for i, ms in enumerate(times, 1))]


def test_head_advice_counts_newlines_only(args, tmp_path):
    """A finished run, then a requeued start the time limit stopped: ``head -n N`` gives the first start whole."""
    first = [*_start(args, 10), DONE]
    lines = first + _start(args, random.randint(4, 9)) + [TIME_LIMIT]
    path = tmp_path / "slurm-1234.out"
    path.write_text("\n".join(lines) + "\n", newline="")
    status = summarise(read_log(path), Window(), 4).status
    assert status.endswith(f"lines 1-{len(first)} of the log, ran iterations 1-10 (finished): the log's first "
                           f"{len(first)} lines alone give its numbers (head -n {len(first)})"), status
    head = subprocess.run(["head", "-n", str(len(first)), str(path)], capture_output=True, check=True).stdout
    assert head.decode().endswith(DONE + "\n")
    assert summarise(parse_log_text(head.decode()), Window(), 4).status == "ok"


def test_a_cut_line_number_agrees_with_grep(args, tmp_path):
    lines, cut = _start(args, 10), random.randint(3, 9)
    number = 1 + next(k for k, line in enumerate(lines) if f"iteration {cut:8d}/" in line)
    lines[number - 1] = lines[number - 1][:random.randint(70, 200)]
    path = tmp_path / "slurm-1.out"
    path.write_text("\n".join([*lines, DONE]) + "\n", newline="")
    grep = subprocess.run(["grep", "-n", f"iteration {cut:8d}/", str(path)], capture_output=True, check=True)
    assert grep.stdout.decode().split(":", 1)[0] == str(number)
    status = summarise(read_log(path), Window(), 4).status
    assert status == f"no line for iteration {cut} of the window 3-10 (the line of iteration {cut} is cut: line {number})"


def test_crlf_logs_parse_as_lf_logs(args, tmp_path):
    """A log with CRLF line ends (a Windows editor, a copy through a share) gives the same row and line numbers."""
    first = [*_start(args, 10), DONE]
    lines = first + _start(args, random.randint(4, 9)) + [TIME_LIMIT]
    rows = {}
    for end in ("\n", "\r\n"):
        path = tmp_path / f"slurm-{len(end)}.out"
        path.write_text(end.join(lines) + end, newline="")
        rows[end] = summarise(read_log(path), Window(), 4)
    assert rows["\r\n"].status == rows["\n"].status
    assert f"(head -n {len(first)})" in rows["\r\n"].status
    assert parse_log_text("\r\n".join(lines)).runs[0].line_span == (1, len(first))


def test_a_crlf_log_with_numbers_keeps_them(args):
    lines = [*_start(args, 10), DONE]
    lf, crlf = (summarise(parse_log_text(end.join(lines) + end), Window(), 4) for end in ("\n", "\r\n"))
    assert lf.ok and crlf.ok and crlf.step_time_s == lf.step_time_s and crlf.tflops_per_gpu == lf.tflops_per_gpu
