"""Signal handlers set for the length of a block and put back after it.

Several places take over stopping signals for a while: a conversion (a signal raises, so its staging directory is
removed), the corpus builder and ``tools/check_interrupt.py`` (likewise, :func:`raising_on_stop`; and none lands
between the renames of a finished corpus or in a clean-up, :func:`held`), and ``oellm recipe --local`` (each one is
passed on to torchrun). They share the rules here: handlers are set only in the main thread (Python allows no other;
elsewhere the block runs with the handlers as they are), a signal the process ignores (SIGHUP under ``nohup``) stays
ignored, and the previous handlers come back on leaving the block, also when it raises.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType

STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""The signals that ask a process to stop: ``kill``/``scancel``/a time limit, a closed terminal, Ctrl-C."""

Handler = Callable[[int, FrameType | None], object]
"""A Python signal handler: called with the signal's number and the interrupted frame."""


@contextmanager
def handling(signals: Iterable[int], handler: Handler) -> Iterator[None]:
    """While entered in the main thread, ``handler`` handles each of ``signals`` that the process does not ignore; on
    leaving, each gets its previous handler back (the default for one set outside Python, which cannot be put back),
    also when ``handler`` raises for a signal that arrives while they are set (those set are put back). In another
    thread nothing is set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, object] = {}
    try:
        for signum in signals:
            before = signal.getsignal(signum)  # kept before it is replaced: a signal may raise right after
            if before is not signal.SIG_IGN:
                previous[signum] = before
                signal.signal(signum, handler)
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, signal.SIG_DFL if before is None else before)


class StopSignal(BaseException):
    """One of :data:`STOPPING_SIGNALS` arrived inside :func:`raising_on_stop`. A ``BaseException``, as
    ``KeyboardInterrupt`` is: an ``except Exception`` in a library the block calls must not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def raising_on_stop() -> Iterator[None]:
    """While entered, the first of :data:`STOPPING_SIGNALS` raises :class:`StopSignal` where the block is, so that its
    clean-up (``finally`` blocks, context managers) runs on the way out; later ones are ignored, so that clean-up is
    not cut short."""
    received: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        if not received:
            received.append(signum)
            raise StopSignal(signum)

    with handling(STOPPING_SIGNALS, stop):
        yield


@contextmanager
def held() -> Iterator[None]:
    """While entered in the main thread, the :data:`STOPPING_SIGNALS` are only recorded; on leaving, the previous
    handlers come back and the first signal recorded is raised again, so its handler runs (or its default action ends
    the process) once the block's work is whole. Blocking them (``pthread_sigmask``) would not hold them: the kernel
    hands a signal to any thread that does not block it (torch's), and Python runs the handler all the same. Elsewhere
    than in the main thread nothing is held; an ignored signal stays ignored."""
    arrived: list[int] = []
    try:
        with handling(STOPPING_SIGNALS, lambda number, frame: arrived.append(number)):
            yield
    finally:
        if arrived:
            signal.raise_signal(arrived[0])
