"""mcore-to-hf's shard writer, left by a failure with a shard file open, closes it; an error of that close does not
replace the failure (a stale handle fails the flush of a failed write again, naming no file), but is added to it as a
note, which a traceback shows: it was dropped. Fresh random tensors, errnos and failures."""

from __future__ import annotations

import errno
import io
import os
import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.convert import safetensors_io
from megatron.oellm.convert.safetensors_io import ShardedSafetensorsWriter, layout_of


def _failing_close(number: int) -> type[io.FileIO]:
    """A shard file whose close closes it and then fails with ``number``, naming no file (a failed flush)."""
    class FailingClose(io.FileIO):
        def close(self) -> None:
            was_open = not self.closed
            super().close()
            if was_open:
                raise OSError(number, os.strerror(number))
    return FailingClose


def test_a_close_error_after_a_failure_is_a_note_on_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensors = {f"t{i}": torch.randn(random.randint(1, 64)) for i in range(random.randint(2, 6))}
    number = random.choice([errno.ESTALE, errno.EIO, errno.ENOSPC, errno.ENOTCONN])
    file_class = _failing_close(number)
    monkeypatch.setattr(safetensors_io, "open", lambda path, mode: file_class(path, mode), raising=False)
    failure = random.choice([RuntimeError, KeyError, OSError])(f"failure {random.randrange(10**6)}")
    written = random.randrange(1, len(tensors))  # at least one: the shard is open; not all: it is not closed yet
    with pytest.raises(type(failure)) as raised:
        with ShardedSafetensorsWriter(tmp_path, layout_of(tensors)) as writer:
            writer.add(dict(list(tensors.items())[:written]))
            raise failure
    assert raised.value is failure
    assert failure.__notes__ == [f"closing {tmp_path / 'shard-00000.tmp'} failed too: [Errno {number}] "
                                 f"{os.strerror(number)}"]
