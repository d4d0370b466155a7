"""SIGTERM / SIGHUP / SIGINT during the checks, before the output folder is set up (seconds at 235B scale), end the
command with one ``error:`` line saying nothing was written and 128 + the signal: it was killed silently."""

from __future__ import annotations

import os
import random
import signal

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert.dist_ckpt import CheckpointReader
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from tests.unit_tests.convert.convert_helpers import signal_handler


def _signal_on(monkeypatch: pytest.MonkeyPatch, owner: type, method: str, signum: int) -> None:
    """Make ``owner.method`` (a header read of the checks) send ``signum`` to this process before it runs."""
    original = getattr(owner, method)

    def signalled(self, *args, **kwargs):
        os.kill(os.getpid(), signum)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, signalled)


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_a_stop_during_the_checks_is_one_line(converted, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture, direction: str) -> None:
    card, _, tmp = converted
    signum = random.choice([signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
    if direction == "hf-to-mcore":
        _signal_on(monkeypatch, SafetensorsSource, "shapes", signum)
        source = ["--hf", str(tmp / "hf")]
    else:
        _signal_on(monkeypatch, CheckpointReader, "common_state", signum)
        source = ["--mcore", str(tmp / "mcore")]

    def not_handled(number, frame):
        raise RuntimeError(f"signal {number} reached the test's handler")

    before = sorted(p.name for p in tmp.iterdir())
    capsys.readouterr()
    with signal_handler(signum, not_handled):
        status = main(["convert", direction, "--model", card.name, *source, "--out", str(tmp / "out")])
    assert status == 128 + signum
    name = signal.Signals(signum).name
    assert capsys.readouterr().err == (f"oellm convert {direction}: error: stopped by {name} before anything was "
                                       "written; --out is as it was\n")
    assert sorted(p.name for p in tmp.iterdir()) == before
