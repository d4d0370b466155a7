"""A signal that arrives as a failed conversion begins its clean-up (before it defers signals) left the
``.NAME.partial-PID`` staging folder on disk while the message said the partial output was removed. The guard now
removes it on the way out."""

from __future__ import annotations

import errno
import os
import random
import signal

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert import output
from megatron.oellm.convert.termination import TerminationGuard
from megatron.oellm.signal_handlers import STOPPING_SIGNALS
from tests.unit_tests.convert.convert_helpers import signal_handler


def test_the_staging_folder_is_removed(converted, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    signum = random.choice(STOPPING_SIGNALS)
    defer = TerminationGuard.defer_for_cleanup

    def signalled_first(self: TerminationGuard) -> None:
        os.kill(os.getpid(), signum)
        defer(self)

    def refused_write(out_dir: object, needed: int) -> None:  # the storage refuses a write inside the staging block
        raise OSError(random.choice([errno.EIO, errno.ENOSPC]), "refused")

    monkeypatch.setattr(output, "check_free_space", refused_write)
    monkeypatch.setattr(TerminationGuard, "defer_for_cleanup", signalled_first)

    def not_handled(number, frame):
        raise RuntimeError(f"signal {number} reached the test's handler")

    out = tmp / "out"
    capsys.readouterr()
    with signal_handler(signum, not_handled):
        status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)])
    err = capsys.readouterr().err
    assert not output.staging_directory(out.resolve()).exists()
    assert sorted(p.name for p in tmp.iterdir()) == ["hf", "mcore"]
    assert err == (f"oellm convert hf-to-mcore: error: stopped by {signal.Signals(signum).name}; the partial output "
                   "was removed, --out is as it was\n")
    assert status == 128 + signum
