"""Run-log rules no other test pinned down (found by mutation testing): two iteration lines after a handled
traceback are proof that training went on also when they are the run's only two lines, and a crash message is
shortened only past 80 characters. Fresh random times and messages."""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm.run_log import last_exception, parse_log_text
from megatron.oellm.scaling_table import Window, summarise
from tests.unit_tests.test_run_log_handled_tracebacks import LOGGED, RETRIED
from tests.unit_tests.test_tables import _args_block, _iteration_line

ARGS = {"train_iters": 10, "log_interval": 1, "global_batch_size": 64, "seq_length": 4096, "world_size": 8}


def _log(handled: str, lines: int) -> str:
    """A run that printed ``handled`` (a logged traceback it went on after) before its first of ``lines`` iteration lines,
    then stopped printing (still running, or cut off) with no end line."""
    text = [*_args_block(ARGS), handled.format(p="")]
    text += [_iteration_line(i, 10, 64, round(random.uniform(60_000.0, 90_000.0), 1), 130.0)
             for i in range(1, lines + 1)]
    return "\n".join(text)


@pytest.mark.parametrize("handled", [LOGGED, RETRIED])
def test_the_runs_only_two_lines_after_a_traceback_show_training_went_on(handled):
    """``oellm table`` on a job in progress: a traceback at start-up that training went on after, then the first two
    iteration lines. Two lines are proof (the rule of every later pair), so the row says truncated, not crashed; one
    line alone is not."""
    run = parse_log_text(_log(handled, 2)).runs[-1]
    assert run.failure == ""
    assert summarise(parse_log_text(_log(handled, 2)), Window(), 4).status == "truncated at iteration 2/10"
    assert parse_log_text(_log(handled, 1)).runs[-1].failure.startswith("crashed (")


def _traceback(message: str) -> str:
    return "\n".join(["Traceback (most recent call last):", '  File "/opt/venv/train.py", line 7, in <module>',
                      "    main()", message])


def test_a_crash_message_is_shortened_only_past_80_characters():
    name = random.choice(["ValueError", "RuntimeError", "torch.OutOfMemoryError"]) + ": "
    exact = name + "".join(random.choices(string.ascii_letters + " ", k=80 - len(name) - 1)) + "x"
    assert len(exact) == 80 and last_exception(_traceback(exact)) == exact
    longer = exact + random.choice(string.ascii_letters)
    assert last_exception(_traceback(longer)) == longer[:77] + "..."
