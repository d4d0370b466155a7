"""A signal during the clean-up after the storage refused a write (disk full) replaced the disk-full message with
"stopped by SIGTERM; the partial output was removed": the user freed no space and ran into the same failure. The
storage's message is kept now, the signal named, with 128 + the signal."""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import types
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.convert import output
from megatron.oellm.signal_handlers import STOPPING_SIGNALS
from tests.unit_tests.convert.convert_helpers import signal_handler


def test_the_disk_full_message_is_kept(converted, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    signum = random.choice(STOPPING_SIGNALS)
    sent: list[Path] = []
    refused: list[bool] = []

    def rmtree(path: Path, *args, **kwargs) -> None:  # the clean-up's, after the refusal
        if ".partial-" in Path(path).name and refused and not sent:
            sent.append(Path(path))
            os.kill(os.getpid(), signum)
        shutil.rmtree(path, *args, **kwargs)

    def disk_full(out_dir: object, needed: int) -> None:  # a write refused inside the staging block
        refused.append(True)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output, "shutil", types.SimpleNamespace(**{**vars(shutil), "rmtree": rmtree}))
    monkeypatch.setattr(output, "check_free_space", disk_full)

    def not_handled(number, frame):
        raise RuntimeError(f"signal {number} reached the test's handler")

    capsys.readouterr()
    with signal_handler(signum, not_handled):
        status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"),
                       "--out", str(tmp / "out")])
    err = capsys.readouterr().err
    assert sent and not sent[0].exists()
    assert err.startswith("oellm convert hf-to-mcore: error: the conversion failed: [Errno 28] No space left on "
                          "device; the partial output was removed, --out is as it was")
    assert err.endswith(f" ({signal.Signals(signum).name} also arrived meanwhile)\n") and err.count("\n") == 1
    assert status == 128 + signum
