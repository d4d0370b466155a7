"""A job whose output a ``tee -a`` also wrote into the file ``sbatch -o`` writes has each piece of output twice, right
after itself (every line, when each read of the tee holds one; ``A B A B`` when two lines came in one read); a run's
whole output appended to its own log has it twice one after the other. Each repeated iteration line read as a restart
(a doubled log of one run gave a row "the window spans a restart ... 8 starts of the program"), and so did every
line of a read of two iteration lines, and an arguments block read at once gave an empty start of its own. The log
is now read once, and a ``note:`` says so; a real restart (a requeue starting again at a lower iteration, with its own
arguments block) still starts a run of its own. Fresh random step times and reads."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.cli import main
from megatron.oellm.run_log import parse_log_text
from tests.unit_tests.megatron_logs import args_block, eight_node_strong_args, log_then

DONE = "[after training is done] datetime: 2026-11-30 12:00:00 "
CRASH = ["Traceback (most recent call last):", '  File "train.py", line 1, in step', "RuntimeError: boom"]


def _twice(count: int) -> str:
    """How the note names a log whose ``count`` iteration lines each come twice."""
    return f"{count} iteration lines appear twice"


@pytest.fixture(scope="module")
def args() -> dict:
    """The 8-node strong-scaling row's arguments, 10 iterations asked for."""
    return eight_node_strong_args(train_iters=10)


def _each_line_twice(text: str) -> str:
    """``text`` as a ``tee -a`` into sbatch's own output file leaves it: every line written twice, back to back."""
    return "".join(line + line for line in text.splitlines(keepends=True))


def _twice_per_read(text: str, first_reads: tuple[int, ...] = ()) -> str:
    """``text`` as such a ``tee`` leaves it when each of its reads holds two or three lines (fresh random counts: a
    read of two iteration lines among them), its first reads the numbers of lines ``first_reads`` gives (e.g. the
    arguments block in one read): each read written twice, back to back."""
    lines = text.splitlines(keepends=True)
    reads = []
    at = 0
    for size in first_reads:
        reads.append(lines[at:at + size])
        at += size
    while at < len(lines):
        size = random.randint(2, 3)
        reads.append(lines[at:at + size])
        at += size
    return "".join("".join(read) * 2 for read in reads)


def _table(capsys, path) -> tuple[str, str]:
    """The CSV row of ``oellm table PATH`` less its path, and its stderr on one line."""
    main(["table", str(path), "--format", "csv"])
    out, err = capsys.readouterr()
    return out.splitlines()[1].replace(str(path), ""), " ".join(err.split())


def test_a_log_with_each_line_twice_gives_the_plain_logs_row_and_says_so(args, tmp_path, capsys):
    plain = tmp_path / "plain.out"
    plain.write_text(log_then(args, 10, [DONE]))
    doubled = tmp_path / "slurm-1234.out"
    doubled.write_text(_each_line_twice(plain.read_text()))
    row, err = _table(capsys, doubled)
    assert row.startswith(",qwen3.5-35b-a3b,ok,8,32,") and row == _table(capsys, plain)[0]
    assert (f"note: {doubled}: {_twice(10)}, the job's output written into the log twice (a `tee` into the file "
            "`sbatch -o` also writes?): read once, as one copy of it") in err
    log = parse_log_text(doubled.read_text())
    assert len(log.runs) == 1 and log.runs[0].line_span == (1, 2 * plain.read_text().count("\n"))
    assert log.runs[0].args == parse_log_text(plain.read_text()).runs[0].args


def test_a_doubled_log_keeps_its_failure_written_once(args, tmp_path, capsys):
    """stderr is not tee'd: a crash's traceback comes once after the doubled lines, and the row names it as in the
    plain log (a failure at the last whole line, not a restart)."""
    last = random.randint(3, 9)
    text = log_then(args, last, [])
    path = tmp_path / "slurm-1234.out"
    path.write_text(_each_line_twice(text) + "\n".join(CRASH) + "\n")
    assert len(parse_log_text(path.read_text()).runs) == 1
    row, err = _table(capsys, path)
    assert f",crashed (RuntimeError: boom) at iteration {last}," in row and _twice(last) in err


def test_a_whole_run_written_twice_is_read_once(args, tmp_path, capsys):
    """The same lines (timestamps and losses included) twice: a copy, not a second run of the window."""
    plain = tmp_path / "plain.out"
    plain.write_text(log_then(args, 10, [DONE]))
    twice = tmp_path / "slurm-1234.out"
    twice.write_text(plain.read_text() * 2)
    row, err = _table(capsys, twice)
    assert row.startswith(",qwen3.5-35b-a3b,ok,8,32,") and row == _table(capsys, plain)[0]
    lines = plain.read_text().count("\n")
    assert f"note: {twice}: the whole run appears twice (lines {lines + 1}-{2 * lines - 1} repeat it), the job's " in err
    assert "holds more than one run" not in err
    assert len(parse_log_text(twice.read_text()).runs) == 1


def test_a_real_restart_is_no_copy(args, tmp_path, capsys):
    """A requeued job starting again at iteration 1 with its own arguments block prints new lines: two runs, no
    note of a copy; doubled by a ``tee``, the same two runs."""
    started = random.randint(3, 7)
    first = log_then(args, started, ["slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT "
                                                  "2026-10-19T13:00:00 DUE TO PREEMPTION ***"])
    second = log_then(args, 10, [DONE])
    for text, doubled in ((first + second, ""), (_each_line_twice(first + second), _twice(started + 10))):
        log = parse_log_text(text)
        assert [run.start for run in log.runs] == [1, 1] and log.doubled == doubled
        assert log.runs[0].failure == "cancelled (preemption)"
    path = tmp_path / "slurm-1234.out"
    path.write_text(first + second)
    row, err = _table(capsys, path)
    assert ",ok," in row and "read once" not in err
    plain = tmp_path / "second.out"
    plain.write_text(second)
    path.write_text(_each_line_twice(first + second))
    row, err = _table(capsys, path)
    assert row == _table(capsys, plain)[0] and _twice(started + 10) in err


def test_a_log_doubled_read_by_read_gives_the_plain_logs_row(args, tmp_path, capsys):
    """A tee's read holding two iteration lines wrote them ``A B A B``: the pairs were not found and every line read
    as a restart ("spans a restart: its lines come from 7 starts"); the arguments block and the next line in one read
    gave a start without a line of its own. Both are read once, and so is a read of a line two ranks printed alike
    and the first iteration line (``x x A x x A``: the copy of ``A`` is not right after a piece that ends with it)."""
    plain = tmp_path / "plain.out"
    alike = "> compiling and loading fused kernels ..."
    plain.write_text(log_then(args, 10, [DONE]).replace("> building datasets ...\n",
                                                        f"> building datasets ...\n{alike}\n{alike}\n"))
    doubled = tmp_path / "slurm-1234.out"  # the block and "> building datasets ..." in the first read
    doubled.write_text(_twice_per_read(plain.read_text(), first_reads=(len(args_block(args)) + 1, 3)))
    row, err = _table(capsys, doubled)
    assert row.startswith(",qwen3.5-35b-a3b,ok,8,32,") and row == _table(capsys, plain)[0] and _twice(10) in err
    log = parse_log_text(doubled.read_text())
    assert [run.start for run in log.runs] == [1] and log.runs[0].line_span == (1, doubled.read_text().count("\n"))
    assert log.runs[0].args == parse_log_text(plain.read_text()).runs[0].args


def test_a_real_restart_in_a_log_doubled_read_by_read_is_no_copy(args):
    """A requeue appended to such a log prints lines of its own: two runs. One iteration line a restart prints again
    word for word (a Megatron without timestamps replaying a deterministic iteration) is no sign of doubling: a
    restart still."""
    started = random.randint(3, 7)
    first = log_then(args, started, ["slurmstepd: error: *** JOB 1234 ON as01r1b01 CANCELLED AT 2026-10-19T13:00:00 "
                                     "DUE TO PREEMPTION ***"])
    second = log_then(args, 10, [DONE])
    log = parse_log_text(_twice_per_read(first + second))
    assert [run.start for run in log.runs] == [1, 1] and log.doubled == _twice(started + 10)
    assert [run.last_iteration for run in log.runs] == [started, 10]
    replayed = next(line for line in first.splitlines() if " iteration        2/" in line)
    again = "".join(replayed + "\n" if " iteration        2/" in line else line + "\n" for line in second.splitlines())
    log = parse_log_text(first + again)
    assert [run.start for run in log.runs] == [1, 1] and log.doubled == ""
    assert [run.last_iteration for run in log.runs] == [started, 10]
