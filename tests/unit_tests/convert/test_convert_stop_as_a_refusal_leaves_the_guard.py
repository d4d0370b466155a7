"""A signal that landed on the first instruction of the termination guard's ``__exit__`` while a refusal left it (the
handler still raising) escaped as a ``_Stopped`` traceback, with the conversion's handlers left installed. It is now
only recorded: the refusal's line is kept, the signal named, with 128 + the signal, and the handlers are those of
before."""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.termination import TerminationGuard
from megatron.oellm.signal_handlers import STOPPING_SIGNALS
from tests.unit_tests.convert.convert_helpers import signal_handler


def _not_handled(number: int, frame: object) -> None:
    raise RuntimeError(f"signal {number} reached the test's handler")


@contextmanager
def _signal_as_the_guard_is_left(signum: int) -> Iterator[list[int]]:
    """Send ``signum`` to this process on the call of :meth:`TerminationGuard.__exit__`, before its first instruction
    (a trace function's ``call`` event: the handler runs there, as for a signal landing at that instant); yields the
    signals sent."""
    leaving = TerminationGuard.__exit__.__code__
    sent: list[int] = []

    def trace(frame: FrameType, event: str, arg: object) -> Callable | None:
        if event == "call" and frame.f_code is leaving and not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)
        return None

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        yield sent
    finally:
        sys.settrace(previous)


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_the_refusal_is_kept_and_the_signal_named(converted, capsys: pytest.CaptureFixture, direction: str) -> None:
    card, _, tmp = converted
    out = tmp / f"file{random.randrange(10**6)}"
    out.write_text(str(random.random()))
    signum = random.choice(STOPPING_SIGNALS)
    source = ["--hf", str(tmp / "hf")] if direction == "hf-to-mcore" else ["--mcore", str(tmp / "mcore")]
    capsys.readouterr()
    with signal_handler(signum, _not_handled):
        before = {number: signal.getsignal(number) for number in STOPPING_SIGNALS}
        with _signal_as_the_guard_is_left(signum) as sent:
            status = main(["convert", direction, "--model", card.name, *source, "--out", str(out)])
        assert sent == [signum]
        assert {number: signal.getsignal(number) for number in STOPPING_SIGNALS} == before
    assert capsys.readouterr().err == (f"oellm convert {direction}: error: output {out.resolve()} is a file; pass a "
                                       f"directory with --out ({signal.Signals(signum).name} also arrived meanwhile)\n")
    assert status == 128 + signum
