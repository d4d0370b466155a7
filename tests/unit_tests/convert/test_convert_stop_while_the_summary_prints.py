"""A signal while ``oellm convert`` printed its summary (the output already in place) ended it with ``oellm convert:
error: interrupted`` (SIGINT) or silently (SIGTERM, SIGHUP), the summary cut short: the user could not tell that the
output was complete. The summary is now printed whole, then one line says the output is complete."""

from __future__ import annotations

import os
import random
import signal

import pytest

from megatron.oellm.cli import main
from megatron.oellm.commands import convert
from megatron.oellm.signal_handlers import STOPPING_SIGNALS
from tests.unit_tests.convert.convert_helpers import signal_handler


def test_the_summary_is_whole_and_the_output_named_complete(converted, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    signum = random.choice(STOPPING_SIGNALS)
    print_skipped = convert._print_skipped

    def signalled(skipped: list[str]) -> None:
        os.kill(os.getpid(), signum)
        print_skipped(skipped)

    monkeypatch.setattr(convert, "_print_skipped", signalled)

    def not_handled(number, frame):
        raise RuntimeError(f"signal {number} reached the test's handler")

    out = (tmp / "out").resolve()
    capsys.readouterr()
    with signal_handler(signum, not_handled):
        status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)])
        assert signal.getsignal(signum) is not_handled
    captured = capsys.readouterr()
    assert "kept config.json with the checkpoint" in captured.out  # the last line of the summary
    assert captured.err == (f"oellm convert hf-to-mcore: error: {signal.Signals(signum).name} arrived after the "
                            f"output was moved into place; the output in {out} is complete\n")
    assert status == 128 + signum
    assert (out / "release").is_dir()
