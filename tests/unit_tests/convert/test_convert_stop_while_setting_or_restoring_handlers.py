"""SIGTERM / SIGHUP / SIGINT while the conversion sets its signal handlers (one set, the next not yet) or puts them
back ended in a ``_Stopped`` traceback, exit 1, with the conversion's handlers left installed: a later ``main`` in the
same process (a notebook, a test run) had its signals turned into that traceback too. Now both end in one line with
128 + the signal, and the handlers are those of before."""

from __future__ import annotations

import os
import random
import signal
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron.oellm import signal_handlers
from megatron.oellm.cli import main
from megatron.oellm.convert.termination import TerminationGuard
from tests.unit_tests.convert.convert_helpers import signal_handler


def _guard_handler(handler: object) -> bool:
    """Whether ``handler`` is a conversion's own (a bound method of a :class:`TerminationGuard`)."""
    return isinstance(getattr(handler, "__self__", None), TerminationGuard)


def _signal_on_set(monkeypatch: pytest.MonkeyPatch, signum: int, when: Callable[[object], bool], after: bool) -> None:
    """Make the first ``signal.signal`` call of :mod:`signal_handlers` for ``signum`` whose handler ``when`` accepts
    send ``signum`` to this process, ``after`` the handler is set (else before)."""
    sent: list[int] = []

    def set_handler(number: int, handler: object) -> object:
        first = not sent and number == signum and when(handler)
        sent.extend([number] if first else [])
        if first and not after:
            os.kill(os.getpid(), signum)
        previous = signal.signal(number, handler)
        if first and after:
            os.kill(os.getpid(), signum)
        return previous

    fake = types.SimpleNamespace(**vars(signal))
    fake.signal = set_handler
    monkeypatch.setattr(signal_handlers, "signal", fake)


def _handlers() -> dict[int, object]:
    """The handler of each stopping signal now."""
    return {number: signal.getsignal(number) for number in signal_handlers.STOPPING_SIGNALS}


def _not_handled(number: int, frame: object) -> None:
    raise RuntimeError(f"signal {number} reached the test's handler")


def _convert_twice(capsys: pytest.CaptureFixture, signum: int, args: list[str], monkeypatch: pytest.MonkeyPatch
                   ) -> tuple[int, str, int]:
    """Run ``main(args)`` with the test's handler on ``signum`` (the injected signal), check that the handlers are
    those of before, then run it again without injection; (first status, its stderr, second status)."""
    with signal_handler(signum, _not_handled):
        before = _handlers()
        capsys.readouterr()
        status = main(args)
        err = capsys.readouterr().err
        assert _handlers() == before
        monkeypatch.undo()
        again = main([*args, "--overwrite"])
        assert _handlers() == before
    return status, err, again


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_stop_while_the_handlers_are_set_is_one_line(converted, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture, direction: str) -> None:
    card, _, tmp = converted
    signum = random.choice(signal_handlers.STOPPING_SIGNALS[:-1])  # one set, the last one not yet
    source = ["--hf", str(tmp / "hf")] if direction == "hf-to-mcore" else ["--mcore", str(tmp / "mcore")]
    _signal_on_set(monkeypatch, signum, _guard_handler, after=True)
    status, err, again = _convert_twice(capsys, signum, ["convert", direction, "--model", card.name, *source,
                                                         "--out", str(tmp / "out")], monkeypatch)
    name = signal.Signals(signum).name
    assert err == f"oellm convert {direction}: error: stopped by {name} before anything was written; --out is as it was\n"
    assert status == 128 + signum
    assert again == 0 and (tmp / "out").is_dir()


@pytest.mark.parametrize("refused", [False, True])
def test_a_stop_while_the_handlers_are_put_back_is_one_line(converted, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture, refused: bool) -> None:
    """After a finished conversion the output is complete; after a refusal the refusal is kept, the signal named."""
    card, _, tmp = converted
    out = tmp / "out"
    if refused:
        out.write_text(str(random.random()))
    signum = random.choice(signal_handlers.STOPPING_SIGNALS)
    _signal_on_set(monkeypatch, signum, lambda handler: not _guard_handler(handler), after=False)
    args = ["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)]
    status, err, again = _convert_twice(capsys, signum, args, monkeypatch)
    name = signal.Signals(signum).name
    if refused:
        assert err == (f"oellm convert hf-to-mcore: error: output {Path(out).resolve()} is a file; pass a directory "
                       f"with --out ({name} also arrived meanwhile)\n")
        assert again == 2
    else:
        assert err == (f"oellm convert hf-to-mcore: error: {name} arrived after the output was moved into place; "
                       f"the output in {out.resolve()} is complete\n")
        assert again == 0 and (out / "release").is_dir()
    assert status == 128 + signum
