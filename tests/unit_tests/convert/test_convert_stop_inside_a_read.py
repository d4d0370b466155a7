"""SIGTERM or SIGINT that arrives inside one of the checks' reads, where a broad ``except`` turns a damaged file into
an error (the DCP metadata and common state, the safetensors index, config.json, the header of a previous export in
``--out``), still ends the command with one line saying nothing was written and 128 + the signal: it ended as a false
"damaged checkpoint" error with exit status 2."""

from __future__ import annotations

import json
import os
import random
import signal
import types
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

from megatron.oellm.cli import main
from megatron.oellm.convert import hf_config, safetensors_io
from tests.unit_tests.convert.convert_helpers import signal_handler


def _files(directory: Path) -> dict[Path, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _signal_in_method(monkeypatch: pytest.MonkeyPatch, owner: type, method: str, signum: int) -> None:
    """Make the first call of ``owner.method`` send ``signum`` to this process from inside it."""
    original = getattr(owner, method)
    sent: list[bool] = []

    def signalled(self, *args, **kwargs):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signum)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, signalled)


def _signal_in_json_loads(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType, signum: int,
                          marker: str) -> None:
    """Make ``module``'s ``json.loads`` send ``signum`` to this process when it parses a text holding ``marker``."""
    sent: list[bool] = []

    def loads(text: str | bytes, *args, **kwargs) -> object:
        as_text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        if not sent and marker in as_text:
            sent.append(True)
            os.kill(os.getpid(), signum)
        return json.loads(text, *args, **kwargs)

    monkeypatch.setattr(module, "json", types.SimpleNamespace(loads=loads, dumps=json.dumps))


def _arrange(point: str, tmp: Path, monkeypatch: pytest.MonkeyPatch, signum: int, main_args: list[str]) -> list[str]:
    """Send ``signum`` at ``point``; the direction's arguments (a previous export in ``--out`` for ``out-header``)."""
    if point == "dcp-metadata":
        _signal_in_method(monkeypatch, dcp.FileSystemReader, "read_metadata", signum)
    elif point == "dcp-common-state":
        _signal_in_method(monkeypatch, dcp.FileSystemReader, "read_data", signum)
    elif point == "index-json":
        _signal_in_json_loads(monkeypatch, safetensors_io, signum, "weight_map")
    elif point == "config-json":
        _signal_in_json_loads(monkeypatch, hf_config, signum, "model_type")
    else:  # the header of a previous export in --out, read to tell whether --overwrite may replace it
        assert main(["convert", *main_args]) == 0
        _signal_in_json_loads(monkeypatch, safetensors_io, signum, "oellm_export")
        return [*main_args, "--overwrite"]
    return main_args


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize(("direction", "point"), [("mcore-to-hf", "dcp-metadata"),
                                                  ("mcore-to-hf", "dcp-common-state"),
                                                  ("mcore-to-hf", "out-header"),
                                                  ("hf-to-mcore", "index-json"),
                                                  ("hf-to-mcore", "config-json")])
def test_a_stop_inside_a_read_of_the_checks_is_one_line(converted, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture, direction: str, point: str,
                                                        signum: int) -> None:
    card, _, tmp = converted
    out = tmp / f"out{random.randrange(10**6)}"
    source = ["--hf", str(tmp / "hf")] if direction == "hf-to-mcore" else ["--mcore", str(tmp / "mcore")]
    args = _arrange(point, tmp, monkeypatch, signum, [direction, "--model", card.name, *source, "--out", str(out)])
    before = _files(tmp)

    def not_handled(number, frame):
        raise RuntimeError(f"signal {number} reached the test's handler")

    capsys.readouterr()
    with signal_handler(signum, not_handled):
        status = main(["convert", *args])
    name = signal.Signals(signum).name
    assert capsys.readouterr().err == (f"oellm convert {direction}: error: stopped by {name} before anything was "
                                       "written; --out is as it was\n")
    assert status == 128 + signum
    assert _files(tmp) == before
    assert sorted(p.name for p in tmp.iterdir()) == sorted({p.parts[0] for p in before} | {"hf", "mcore"})
