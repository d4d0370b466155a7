"""Stopping a conversion by a signal at any point, with one line: SIGTERM (``scancel``, a Slurm time limit), SIGHUP
(a closed terminal) and SIGINT (Ctrl-C) end it in :class:`ConversionInterrupted`, saying what became of ``--out``.

The signal handler raises :class:`_Stopped`, a ``BaseException`` (as ``KeyboardInterrupt`` is), where the conversion
is: a broad ``except Exception`` / ``except ValueError`` that turns a damaged file into an error (the DCP metadata, a
safetensors index, a JSON config) must not report the stop as a damaged checkpoint. Leaving the guard turns it, and
any error seen after a signal arrived (torch's checkpoint reader wraps even a ``BaseException`` in its own), into
:class:`ConversionInterrupted`. Once the guarded block has ended (the guard's ``__exit__`` is running, from its first
instruction on) a signal is only recorded: raised there, nothing would turn it into one line."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from types import FrameType

from megatron.oellm.convert.errors import ConversionError, ConversionInterrupted
from megatron.oellm.signal_handlers import STOPPING_SIGNALS, handling


class _Stopped(BaseException):
    """A stopping signal arrived inside :class:`TerminationGuard`; never seen outside it."""


class TerminationGuard:
    """While entered in the main thread, SIGTERM, SIGHUP and SIGINT stop the conversion (once) where it is and it ends
    in :class:`ConversionInterrupted`: during the checks saying that nothing was written; once :attr:`staging` is set,
    that the partial output was removed (the staging directory is removed on the way out). The previous handlers come
    back on exit, whole also when a signal arrives while they are set or put back.
    From :meth:`deferred` on a signal is only recorded: the finished output is not left half moved; one recorded
    after that block is raised on leaving the guard, so that a stop at any time ends in one line (a caller that
    reports on the output, e.g. prints a summary, does so inside the guard and passes it to the conversion). A signal
    that arrives after an error ended the conversion (during its clean-up, or on leaving the guard) keeps that error's
    message, with the signal named (:attr:`failed_first`)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.failed_first = False
        """Whether an error ended the conversion before any signal arrived: a later signal is named beside it."""
        self.output: Path | None = None
        """The finished output once it is in place (:meth:`deferred` ended): a signal from then on says it is
        complete."""
        self._remove_partial: Callable[[], None] | None = None
        self._deferring = False
        self._after_the_block = False  # the signal was recorded in __exit__: an error the block raised came first
        self._handlers = handling(STOPPING_SIGNALS, self._handle)  # main thread only; an ignored signal stays ignored

    def __enter__(self) -> TerminationGuard:
        try:
            self._handlers.__enter__()
        except _Stopped:  # arrived while the handlers were set: ``handling`` put back those it had set
            raise ConversionInterrupted(self.received, nothing_written=True) from None
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: object) -> None:
        """Remove a partial output a stop left and put the previous handlers back, a signal meanwhile only recorded
        (see :meth:`_handle`); then raise how the conversion ended, the last signal of this guard's counted."""
        if isinstance(exc, _Stopped) and self._remove_partial is not None:  # it cut the writer's clean-up short
            self._remove_partial()
        self._handlers.__exit__(exc_type, exc, traceback)
        self.failed_first = self.failed_first or (exc is not None and (self.received is None or self._after_the_block))
        stop = self._ending(exc)
        if stop is not None and stop is not exc:
            raise stop from exc

    def _ending(self, exc: BaseException | None) -> ConversionInterrupted | None:
        """What leaving the guard raises after ``exc`` (None: the block succeeded): :meth:`interrupted`, or for a
        signal after a successful block, that the output is complete."""
        if exc is not None:
            return self.interrupted(exc)
        if self.received is None:
            return None
        return ConversionInterrupted(self.received, output_complete=True, output_in_place=self.output)

    def interrupted(self, error: BaseException) -> ConversionInterrupted | None:
        """What a conversion that ``error`` ended raises once a signal has arrived: ``error`` itself if it is a
        :class:`ConversionInterrupted`; if the error came first (:attr:`failed_first`), its message with the signal
        named (None for an error that is not a :class:`ConversionError`: its traceback is the report); else a new one
        saying whether anything was written, or that the output is complete once it is (whatever ``error`` is: the
        signal's own, a library's wrapping of it, a refusal the stop led to, the signal is why it ended). None if no
        signal arrived (``error`` stands)."""
        if self.received is None:
            return None
        if isinstance(error, ConversionInterrupted):
            return error
        if self.failed_first:
            return ConversionInterrupted(self.received, failure=str(error)) if isinstance(error, ConversionError) else None
        if self.output is not None:  # an error after the output was in place (printing a summary): the output stands
            return ConversionInterrupted(self.received, output_in_place=self.output)
        return ConversionInterrupted(self.received, nothing_written=not self.staging)

    @property
    def staging(self) -> bool:
        """Whether the output is being written (:meth:`writing` was called: a signal then removes it)."""
        return self._remove_partial is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """Record the first signal; raise unless deferring or leaving the guard (a second signal is ignored). Leaving
        is told by the interrupted ``frame`` (``__exit__`` on its stack), not by a flag ``__exit__`` would set: a
        signal may land on its first instruction, before any flag is set, and a ``_Stopped`` raised there would end
        the process in a traceback."""
        if self.received is not None:
            return
        self.received = signum
        if _leaving_a_guard(frame):
            self._after_the_block = True
        elif not self._deferring:
            raise _Stopped(signum)

    @contextmanager
    def deferred(self, output: Path) -> Iterator[None]:
        """From here on only record signals (the finished output must not be left half moved into ``output``); raise
        for one that arrived during the block once it is done."""
        self._deferring = True
        yield
        self.output = output
        if self.received is not None:
            raise ConversionInterrupted(self.received, output_complete=True)

    def writing(self, remove_partial: Callable[[], None]) -> None:
        """The output is being written from now on: a stop removes it with ``remove_partial``, which the guard calls
        itself on the way out when a signal cut the writer's own clean-up short (it arrived as that began)."""
        self._remove_partial = remove_partial

    def defer_for_cleanup(self) -> None:
        """From here on only record signals: removing the staging directory must not be cut short. Called as a failed
        conversion begins its clean-up: a signal that had not arrived by then comes after the error
        (:attr:`failed_first`)."""
        self._deferring = True
        self.failed_first = self.failed_first or self.received is None


def _leaving_a_guard(frame: FrameType | None) -> bool:
    """Whether ``frame``, where a signal interrupted the program, is a :class:`TerminationGuard`'s ``__exit__`` or
    runs within one: the guarded block has ended, whatever instruction of ``__exit__`` the signal landed on."""
    while frame is not None:
        if frame.f_code is TerminationGuard.__exit__.__code__:
            return True
        frame = frame.f_back
    return False


def guarded(guard: TerminationGuard | None) -> AbstractContextManager[TerminationGuard]:
    """``guard`` as it is when a caller entered it (and leaves it itself, e.g. after printing a summary), else a new
    :class:`TerminationGuard` for the block to enter."""
    return nullcontext(guard) if guard is not None else TerminationGuard()
