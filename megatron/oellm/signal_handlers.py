"""Signal handlers set for the length of a block and put back after it.

Four places take over stopping signals for a while: a conversion (a signal raises, so its staging directory is
removed), the corpus builder (likewise for its partial files; and none lands between the renames of a finished corpus),
and ``oellm recipe --local`` (each one is passed on to torchrun). They share the rules here: handlers are set only in
the main thread (Python allows no other; elsewhere the block runs with the handlers as they are), a signal the process
ignores (SIGHUP under ``nohup``) stays ignored, and the previous handlers come back on leaving the block, also when it
raises.
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
    leaving, each gets its previous handler back (the default for one set outside Python, which cannot be put back).
    In another thread nothing is set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signals
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, signal.SIG_DFL if before is None else before)
