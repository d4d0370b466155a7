"""Stopping a conversion by a signal at any point, with one line: SIGTERM (``scancel``, a Slurm time limit), SIGHUP
(a closed terminal) and SIGINT (Ctrl-C) raise :class:`ConversionInterrupted` where the conversion is, saying what
became of ``--out``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from megatron.oellm.convert.errors import ConversionInterrupted
from megatron.oellm.signal_handlers import STOPPING_SIGNALS, handling


class TerminationGuard:
    """While entered in the main thread, SIGTERM, SIGHUP and SIGINT raise :class:`ConversionInterrupted` (once) where the
    conversion is: during the checks it says that nothing was written; once :attr:`staging` is set, that the partial
    output was removed (the staging directory is removed on the way out). The previous handlers come back on exit.
    From :meth:`deferred` on a signal is only recorded: the finished output is not left half moved; one recorded
    after that block is raised on leaving the guard, so that a stop at any time ends in one line."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.staging = False
        """Whether the output is being written (a signal then removes the staging directory)."""
        self._deferring = False
        self._handlers = handling(STOPPING_SIGNALS, self._handle)  # main thread only; an ignored signal stays ignored

    def __enter__(self) -> TerminationGuard:
        self._handlers.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self._handlers.__exit__(exc_type, *exc_info)
        if exc_type is None and self.received is not None:  # arrived after the output was moved into place
            raise ConversionInterrupted(self.received, output_complete=True)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """Record the first signal; raise unless deferring (a second signal while cleaning up is ignored)."""
        if self.received is None:
            self.received = signum
            if not self._deferring:
                raise ConversionInterrupted(signum, nothing_written=not self.staging)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """From here on only record signals (the finished output must not be left half moved); raise for one that
        arrived during the block once it is done."""
        self._deferring = True
        yield
        if self.received is not None:
            raise ConversionInterrupted(self.received, output_complete=True)

    def defer_for_cleanup(self) -> None:
        """From here on only record signals: removing the staging directory must not be cut short."""
        self._deferring = True
