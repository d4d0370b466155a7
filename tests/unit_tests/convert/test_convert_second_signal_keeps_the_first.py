"""A second stopping signal (Ctrl-C pressed again, ``scancel`` after a SIGHUP) while the first one stops the
conversion is ignored: the report and the exit status (128 + the signal) are the first signal's, and the second
raises nothing of its own into the clean-up."""

from __future__ import annotations

import os
import random
import signal
from contextlib import ExitStack
from pathlib import Path

import pytest

from megatron.oellm.convert.errors import ConversionInterrupted
from megatron.oellm.convert.termination import TerminationGuard
from megatron.oellm.signal_handlers import STOPPING_SIGNALS
from tests.unit_tests.convert.convert_helpers import signal_handler


def _not_handled(number: int, frame: object) -> None:
    raise RuntimeError(f"signal {number} reached the test's handler")


def _test_handlers() -> ExitStack:
    """The test's handler on every stopping signal: a signal the guard lets through fails the test."""
    stack = ExitStack()
    for number in STOPPING_SIGNALS:
        stack.enter_context(signal_handler(number, _not_handled))
    return stack


def _assert_first_named(stopped: ConversionInterrupted, first: int, second: int) -> None:
    message = str(stopped)
    assert stopped.exit_status == 128 + first, message
    assert signal.Signals(first).name in message and signal.Signals(second).name not in message, message


def test_a_second_signal_while_the_first_unwinds_is_ignored() -> None:
    """Fails if the second signal raises again (from the clean-up it lands in) or replaces the first."""
    first, second = random.sample(STOPPING_SIGNALS, 2)
    cleaned_up = []
    with _test_handlers(), pytest.raises(ConversionInterrupted) as stopped, TerminationGuard():
        try:
            os.kill(os.getpid(), first)
        finally:
            os.kill(os.getpid(), second)
            cleaned_up.append(True)
    assert cleaned_up == [True]
    _assert_first_named(stopped.value, first, second)
    assert "before anything was written" in str(stopped.value)


def test_a_second_signal_while_the_output_is_moved_in_is_ignored(tmp_path: Path) -> None:
    """Both arrive while deferred (the output being moved into place): the first is the one reported."""
    first, second = random.sample(STOPPING_SIGNALS, 2)
    out = tmp_path / f"out{random.randrange(10**6)}"
    with _test_handlers(), pytest.raises(ConversionInterrupted) as stopped, TerminationGuard() as guard:
        with guard.deferred(out):
            os.kill(os.getpid(), first)
            os.kill(os.getpid(), second)
    _assert_first_named(stopped.value, first, second)
    assert "the output is complete" in str(stopped.value)
