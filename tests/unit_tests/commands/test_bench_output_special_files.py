"""``oellm bench --output``: a FIFO or device is written in place, never read nor checked as a file to replace, and an
existing binary file is somebody's data, refused (mutation audit of ``is_replaceable_report`` and
``check_output_path``)."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron.oellm.commands.bench import check_output_path, is_replaceable_report

WAIT_SECONDS = 60
"""How long a check may take before the test calls it blocked (it returns at once; opening a FIFO with no writer to
read it never returns)."""


def _returns(call: Callable[[], object]) -> object:
    """What ``call()`` returns (or raises), run in a thread so that a blocking read fails the test instead of hanging
    it."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(WAIT_SECONDS)
    assert outcome, "the check blocked"
    return outcome[0]


def test_a_fifo_is_replaceable_without_being_read(tmp_path: Path) -> None:
    """``--output`` a FIFO (``mkfifo report; cat report &``): taken as it is, without opening it to read (with no
    writer that open would block the run before it starts)."""
    fifo = tmp_path / f"report{random.randrange(1000)}"
    os.mkfifo(fifo)
    assert _returns(lambda: is_replaceable_report(fifo)) is True
    assert _returns(lambda: check_output_path(fifo)) is None


def test_an_existing_binary_file_is_refused(tmp_path: Path) -> None:
    """An existing file of bytes that are no UTF-8 text (a checkpoint shard, a core dump): not an earlier report,
    refused rather than replaced, however the read fails."""
    output = tmp_path / "report.json"
    data = b"\xff\xfe\x00" + random.randbytes(random.randint(16, 4096))
    output.write_bytes(data)
    assert is_replaceable_report(output) is False
    with pytest.raises(ValueError, match="exists and is not an earlier bench report"):
        check_output_path(output)
    assert output.read_bytes() == data


def test_dev_null_is_taken_where_dev_cannot_be_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--output /dev/null`` is written in place, so its folder is not checked as the one a temporary file would go
    to: accepted where ``/dev`` cannot be written (any user but root)."""
    real_access = os.access

    def dev_unwritable(path: os.PathLike | str, mode: int, **kwargs: object) -> bool:
        """``os.access`` that says ``/dev`` cannot be written."""
        if Path(path).absolute() == Path("/dev") and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", dev_unwritable)
    check_output_path(Path("/dev/null"))
