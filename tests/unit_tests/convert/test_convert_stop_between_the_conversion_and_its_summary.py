"""A signal in the gap between the conversion handing its signal handlers back and the summary setting its own
reached the previous handlers: Ctrl-C said ``stopped by SIGINT; --out is as it was`` though the output had been
replaced, SIGTERM under a shell's default ended the process silently (status 143). The conversion's handlers now stay
until the summary is printed: it is printed whole, then one line says the output is complete, with 128 + the signal."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert import to_hf, to_mcore
from megatron.oellm.signal_handlers import STOPPING_SIGNALS
from tests.unit_tests.convert.convert_helpers import signal_handler

_CONVERSION = {"hf-to-mcore": (to_mcore, "hf_to_mcore_checkpoint"), "mcore-to-hf": (to_hf, "mcore_to_hf_checkpoint")}


def _not_handled(number: int, frame: object) -> None:
    raise RuntimeError(f"signal {number} reached the test's handler")


def _signal_on_return(monkeypatch: pytest.MonkeyPatch, direction: str, signum: int) -> None:
    """Make the conversion of ``direction`` send ``signum`` to this process just after it returned its summary."""
    module, name = _CONVERSION[direction]
    convert: Callable[..., object] = getattr(module, name)

    def signalled(*args: object, **kwargs: object) -> object:
        summary = convert(*args, **kwargs)
        os.kill(os.getpid(), signum)
        return summary

    monkeypatch.setattr(module, name, signalled)


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_stop_before_the_summary_says_the_output_is_complete(converted, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture, direction: str) -> None:
    card, _, tmp = converted
    signum = random.choice(STOPPING_SIGNALS)
    previous = signal.default_int_handler if signum == signal.SIGINT else _not_handled  # Ctrl-C as the CLI has it
    _signal_on_return(monkeypatch, direction, signum)
    out = (tmp / f"out{random.randrange(10**6)}").resolve()
    source = ["--hf", str(tmp / "hf")] if direction == "hf-to-mcore" else ["--mcore", str(tmp / "mcore")]
    capsys.readouterr()
    with signal_handler(signum, previous):
        status = main(["convert", direction, "--model", card.name, *source, "--out", str(out)])
        assert signal.getsignal(signum) is previous
    captured = capsys.readouterr()
    assert f" to {out} in " in captured.out.splitlines()[0]  # the summary, printed whole
    assert captured.err == (f"oellm convert {direction}: error: {signal.Signals(signum).name} arrived after the output "
                            f"was moved into place; the output in {out} is complete\n")
    assert status == 128 + signum
    assert sorted(p.name for p in out.iterdir())


def test_a_stop_then_a_failed_summary_says_the_output_is_complete(converted, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """A summary that fails after the signal (its reader gone: ``| head``) must not say the output was removed."""
    from megatron.oellm.commands import convert

    card, _, tmp = converted
    signum = random.choice(STOPPING_SIGNALS)

    def signalled_then_broken(skipped: list[str]) -> None:
        os.kill(os.getpid(), signum)
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(convert, "_print_skipped", signalled_then_broken)
    out = (tmp / f"out{random.randrange(10**6)}").resolve()
    capsys.readouterr()
    with signal_handler(signum, _not_handled):
        status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)])
    assert capsys.readouterr().err == (f"oellm convert hf-to-mcore: error: {signal.Signals(signum).name} arrived after "
                                       f"the output was moved into place; the output in {out} is complete\n")
    assert status == 128 + signum
    assert (out / "release").is_dir()
