"""A log whose arguments block lost its end line (garbled by another rank's output) but goes on with iteration
lines: the block ends at the first iteration line, instead of every later line being read as an argument and the
row saying 'truncated inside the arguments block'. Fresh random step times."""

from __future__ import annotations

import random

import pytest

from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.megatron_logs import args_block, iteration_line, megatron_args, random_times

VOCAB = " > padded vocab (size: 151643) with 101 dummy tokens (new size: 151744)"
DONE = "[after training is done] datetime: 2026-11-30 12:00:00.000000 "


@pytest.fixture(scope="module")
def args() -> dict:
    """Megatron's arguments of the 8-node row of the Qwen3.5 strong-scaling recipe."""
    return megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})


def _lines(args: dict, first: int = 1, count: int = 10) -> list[str]:
    """Iteration lines ``first..first + count - 1`` of 10 (fresh random times)."""
    times = random_times(count, random.uniform(60_000.0, 90_000.0))
    return [iteration_line(i, 10, args["global_batch_size"], ms, round(random.uniform(100, 140), 1))
            for i, ms in enumerate(times, start=first)]


def _without_end(args: dict) -> list[str]:
    """The arguments block less its end line, then megatron's setup messages."""
    return [*args_block(args)[:-1], "> building datasets ...", VOCAB]


def test_the_block_ends_at_the_first_iteration_line(args):
    lines = _lines(args)
    text = "\n".join([*_without_end(args), *lines, DONE])
    log = parse_log_text(text)
    whole = parse_log_text("\n".join([*args_block(args), "> building datasets ...", VOCAB, *lines, DONE]))
    assert len(log.runs) == 1 and log.runs[0].args_complete and log.runs[0].finished
    assert log.runs[0].args == whole.runs[0].args  # no setup message or iteration line read as an argument
    assert log.runs[0].vocabulary == (151643, 151744)
    assert sorted(log.iterations) == list(range(1, 11))
    row = summarise(log, Window(), 4)
    assert row.ok and row == summarise(whole, Window(), 4)


def test_a_requeued_start_after_such_a_block_is_its_own_run(args):
    """A second arguments block (a requeued job) still starts the next run, whose lines the window reads."""
    text = "\n".join([*_without_end(args), *_lines(args, count=4), *args_block(args), *_lines(args), DONE])
    log = parse_log_text(text)
    assert len(log.runs) == 2 and all(run.args_complete for run in log.runs)
    assert {line.run for line in log.iterations.values()} == {1}
    assert summarise(log, Window(), 4).ok


def test_a_log_cut_inside_the_block_is_still_truncated_there(args):
    text = "\n".join(args_block(args)[:random.randint(2, 40)])
    assert summarise(parse_log_text(text), Window(), 4).status == "truncated inside the arguments block"
