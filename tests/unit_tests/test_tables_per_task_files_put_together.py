"""``oellm table`` on per-task output files put one after the other (``srun -o out.%t``, then ``cat out.0 out.N``),
as its advice for one task's file asks for "a combined log": megatron prints the arguments block, the checkpoint
load and save lines and how the run ended (``[after training is done]``, an early exit) on rank 0, the iteration
lines on the last rank, so rank 0's lines all come before the iteration lines. The last rank's file alone has no
arguments block and gives no row (``test_tables_per_task_output_files``); put together, a run that exited early
(``--exit-duration-in-mins``) read "truncated" and a requeued job's load line was read as its first start's, with
nothing said. A ``note:`` now names the first rank-0 line found before iteration lines printed before it; the same
lines in the order megatron printed them, or a resumed start's own load line, give none. Fresh random iterations and
step times."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.commands.table import log_row
from megatron.oellm.scaling_table import Window
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

STAMP = "2026-11-30 12:00:00.000000"
DONE = f"[after training is done] datetime: {STAMP} "
EXITED = f"[exiting program after 30.1 minutes] datetime: {STAMP} "
NOTE_END = ("(printed by rank 0), comes before iteration lines printed before it: per-task output files put one "
            "after the other? The row reads the log in file order, so its status may not say how the run ended or "
            "where it resumed; give the job's combined output (all tasks in one file, as sbatch -o writes it)")


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe, 40 iterations asked for, with the
    time limit the recipes add with checkpoints."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "train_iters": 40,
                                                           "exit_duration_in_mins": 30})


def _iterations(args: dict, first: int, last: int) -> list[str]:
    """The last rank's iteration lines ``first..last`` (fresh random times)."""
    times = random_times(last - first + 1, random.uniform(60_000.0, 90_000.0))
    return [iteration_line(i, args["train_iters"], args["global_batch_size"], times[i - first],
                           round(random.uniform(100, 140), 1)) for i in range(first, last + 1)]


def _saved(iteration: int) -> list[str]:
    """Rank 0's two lines of megatron-core 0.19.2's checkpoint save of ``iteration``."""
    return [f"[{STAMP}] saving checkpoint at iteration {iteration:7d} to /ckpt in torch_dist format",
            f"  [{STAMP}] successfully saved checkpoint from iteration {iteration:7d} to /ckpt [ t 1/1, gtp_remat 1/1, "
            "p 1/4 ]"]


def _loaded(iteration: int) -> str:
    """Rank 0's line of megatron-core 0.19.2's checkpoint load of ``iteration``."""
    return f"  successfully loaded checkpoint from /ckpt [ t 1/1, gtp_remat 1/1, p 1/4 ] at iteration {iteration}"


def _setup(args: dict) -> list[str]:
    """Rank 0's lines before training: the arguments block and megatron's setup messages."""
    return [*args_block(args), "> building datasets ...",
            " > padded vocab (size: 151643) with 101 dummy tokens (new size: 151744)"]


def _ended(args: dict) -> tuple[list[str], list[str], str]:
    """A run that ended early (``--exit-duration-in-mins``) or finished, with or without a save: (rank 0's lines
    after its setup, the last rank's lines, what the note says of the first rank-0 line that follows an iteration),
    in the order megatron printed them: each save after the line of its iteration, the end after the last line."""
    last = random.randint(12, 40) if random.random() < 0.5 else 40
    end = DONE if last == 40 else EXITED
    saves = sorted(random.sample(range(2, last + 1), random.randint(0, 2)))
    what = (f"the checkpoint save of iteration {saves[0]}" if saves else
            "megatron's end-of-training line" if end == DONE else "megatron's early-exit line")
    return [line for save in saves for line in _saved(save)] + [end], _iterations(args, 1, last), what


def _interleaved(rank0: list[str], iterations: list[str]) -> list[str]:
    """``rank0``'s lines (saves, then the end) and ``iterations`` in the order megatron printed them."""
    lines, pending = [], list(rank0)
    for line in iterations:
        lines.append(line)
        iteration = int(line.split("iteration", 1)[1].split("/")[0])
        while pending[0].startswith(f"[{STAMP}] saving checkpoint at iteration {iteration:7d} "):
            lines += pending[:2]
            pending = pending[2:]
    return lines + pending


def _notes(tmp_path: Path, lines: list[str]) -> tuple[str, str]:
    """(the row's status, its ``note:`` lines) of the log ``lines``."""
    log = tmp_path / "combined.out"
    log.write_text("\n".join(lines) + "\n")
    row, notes = log_row(str(log), Window(), 4, None)
    return row.status, notes


def test_rank_0s_file_then_the_last_ranks_is_named(tmp_path, args):
    rank0, iterations, what = _ended(args)
    setup = _setup(args)
    lines = setup + rank0 + iterations
    _, notes = _notes(tmp_path, lines)
    assert notes == f"note: {tmp_path / 'combined.out'}: line {len(setup) + 1}, {what} {NOTE_END}"


def test_the_same_lines_in_the_order_printed_give_no_note(tmp_path, args):
    rank0, iterations, _ = _ended(args)
    status, notes = _notes(tmp_path, _setup(args) + _interleaved(rank0, iterations))
    assert notes == ""
    assert status == "ok"


def test_a_requeued_jobs_files_put_together_are_named(tmp_path, args):
    """Rank 0's file holds both starts' arguments blocks and the second start's load line, all before the last
    rank's lines of the first start: the load was read as the first start's, which trained from iteration 1."""
    resumed_at = random.randint(1, 30)
    setup = _setup(args) + _saved(resumed_at) + _setup(args)
    lines = setup + [_loaded(resumed_at), *_iterations(args, 1, resumed_at + random.randint(1, 3)),
                     *_iterations(args, resumed_at + 1, 40)]
    _, notes = _notes(tmp_path, lines)
    assert notes == (f"note: {tmp_path / 'combined.out'}: line {len(setup) + 1}, the checkpoint load of iteration "
                     f"{resumed_at} {NOTE_END}")


def test_a_resumed_starts_own_load_line_gives_no_note(tmp_path, args):
    """A start loads its checkpoint before it trains: the load line before its lines is in the order printed, in a
    combined log and in rank 0's file put before the last rank's alike."""
    resumed_at = random.randint(1, 20)
    lines = [*_setup(args), _loaded(resumed_at), *_iterations(args, resumed_at + 1, resumed_at + 12)]
    assert _notes(tmp_path, lines)[1] == ""


@pytest.mark.parametrize("before", [_saved(1), ["Termination requested. Performing orderly shutdown."]],
                         ids=["upcycled-save", "signal"])
def test_rank_0s_lines_megatron_may_print_before_training_give_no_note(tmp_path, args, before):
    """An upcycled model's checkpoint, saved as iteration 1 before training, and ``--exit-signal-handler-for-training``'s
    message on a signal received while the run sets up come before the first iteration line in any log."""
    lines = [*_setup(args), *before, *_iterations(args, 1, random.randint(1, 12))]
    assert _notes(tmp_path, lines)[1] == ""


def test_the_note_is_printed_on_stderr(tmp_path, args, capsys):
    rank0, iterations, what = _ended(args)
    log = tmp_path / "slurm-1234.out"
    log.write_text("\n".join(_setup(args) + rank0 + iterations) + "\n")
    main(["table", str(log)])
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {log}: line {len(_setup(args)) + 1}, {what} {NOTE_END}"]
