"""A ``config.json`` that is a symbolic link to nothing, a FIFO or a socket: refused by ``read_config_files``, not
skipped as missing (a Hugging Face cache snapshot whose ``config.json`` points at a deleted blob converted with no
config, checked by tensor shapes only) and not read (a FIFO would block the conversion)."""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.hf_config import CONFIG_FILES, read_config_files
from tests.unit_tests.convert.convert_helpers import write_hf

WAIT_SECONDS = 60
"""How long a refusal may take before the test calls the read blocked (it returns at once; a read of a FIFO with no
writer would never return)."""


def _refusal(directory: Path) -> str:
    """The message ``read_config_files(directory)`` refuses with, run in a thread so that a blocking read fails the
    test instead of hanging it."""
    outcome: list[BaseException | dict] = []

    def read() -> None:
        try:
            outcome.append(read_config_files(directory))
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(WAIT_SECONDS)
    assert outcome, f"read_config_files({directory}) blocked"
    assert isinstance(outcome[0], ConversionError), f"not refused: {outcome[0]!r}"
    return str(outcome[0])


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_link_to_a_deleted_blob_is_refused(name: str, tmp_path: Path) -> None:
    """``snapshots/<rev>/config.json -> ../../blobs/<hash>`` with the blob deleted: refused naming the target."""
    snapshot = tmp_path / "snapshots" / f"rev{random.randrange(10**6)}"
    snapshot.mkdir(parents=True)
    target = f"../../blobs/{random.randrange(16**12):012x}"
    (snapshot / name).symlink_to(target)
    message = _refusal(snapshot)
    assert f"{snapshot / name} is a symbolic link to nothing (its target {target!r} is missing" in message
    assert f"not the JSON file {name}" in message


def test_a_loop_of_links_is_refused(tmp_path: Path) -> None:
    """``config.json -> other -> config.json``: refused, not skipped as missing."""
    other = f"other{random.randrange(1000)}"
    (tmp_path / "config.json").symlink_to(other)
    (tmp_path / other).symlink_to("config.json")
    assert "is a symbolic link to nothing" in _refusal(tmp_path)
    assert "or the links loop" in _refusal(tmp_path)


def _fifo(path: Path) -> None:
    """A FIFO at ``path``."""
    os.mkfifo(path)


def _socket(path: Path) -> None:
    """A listening Unix socket at ``path`` (bound by a name relative to its folder: the full path may be longer than a
    socket address holds); left open until the test ends."""
    server = socket.socket(socket.AF_UNIX)
    cwd = Path.cwd()
    os.chdir(path.parent)
    try:
        server.bind(path.name)
    finally:
        os.chdir(cwd)
    _OPEN_SOCKETS.append(server)


_OPEN_SOCKETS: list[socket.socket] = []
"""Sockets :func:`_socket` made, closed by :func:`sockets_closed`."""


@pytest.fixture(autouse=True)
def sockets_closed() -> Iterator[None]:
    """Close the sockets a test made."""
    yield
    while _OPEN_SOCKETS:
        _OPEN_SOCKETS.pop().close()


@pytest.mark.parametrize("make", [_fifo, _socket], ids=["fifo", "socket"])
@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_special_file_is_no_regular_file(make: Callable[[Path], None], name: str, tmp_path: Path) -> None:
    """A FIFO or socket named ``config.json``: the "no regular file" refusal, without opening it."""
    make(tmp_path / name)
    assert _refusal(tmp_path) == (f"{tmp_path / name} is no regular file, not the JSON file {name}: put the model's "
                                  f"{name} there, or remove it to convert without one")


def test_hf_to_mcore_refuses_a_snapshot_whose_config_blob_is_gone(tiny_hf, capsys) -> None:
    """``oellm convert hf-to-mcore --hf <snapshot>`` whose ``config.json`` links to a deleted blob: one line, exit 2,
    no ``--out`` (it converted with no config, checked by tensor shapes only)."""
    from megatron.oellm.cli import main

    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    (tmp / "hf" / "config.json").unlink()
    (tmp / "hf" / "config.json").symlink_to(f"../blobs/{random.randrange(16**12):012x}")
    out = tmp / "mcore"
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{tmp / 'hf' / 'config.json'} is a symbolic link to nothing" in last, last
    assert not out.exists()
