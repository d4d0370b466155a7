"""Signal handlers set for the length of a block and put back after it.

Three places take over stopping signals for a while: the corpus builder (a signal raises, so its partial files are
removed; and none lands between the renames of a finished corpus), and ``oellm recipe --local`` (each one is passed on
to torchrun). They share the rules here: a signal the process ignores (SIGHUP under ``nohup``) stays ignored, and the
previous handlers come back on leaving the block, also when it raises.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType

Handler = Callable[[int, FrameType | None], object]
"""A Python signal handler: called with the signal's number and the interrupted frame."""


@contextmanager
def handling(signals: Iterable[int], handler: Handler) -> Iterator[None]:
    """While entered, ``handler`` handles each of ``signals`` that the process does not ignore; on leaving, each
    gets its previous handler back (the default for one set outside Python, which cannot be put back). Only the main
    thread may set handlers (``ValueError`` elsewhere, as ``signal.signal`` raises)."""
    previous = {signum: signal.signal(signum, handler) for signum in signals
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, signal.SIG_DFL if before is None else before)
