"""Ctrl-C in any ``oellm`` subcommand ends it with one ``oellm COMMAND: error: interrupted`` line and status 130 (as
a shell reports SIGINT) instead of a 48-line ``KeyboardInterrupt`` traceback, also while ``oellm convert`` imports
torch; ``convert``'s own handling still removes its partial output first and reports it in its own line."""

from __future__ import annotations

import importlib
import random
import signal
import sys
import types
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import INTERRUPTED_EXIT_STATUS, main
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, signal_at_layer_one, signal_handler, write_hf

_ARGV = {"table": ["table", "run.log"], "recipe": ["recipe", "list"], "doctor": ["doctor"], "models": ["models"]}


def _interrupted(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("command", sorted(_ARGV))
def test_ctrl_c_in_a_subcommand_is_one_line_and_status_130(command: str, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(importlib.import_module(f"megatron.oellm.commands.{command}"), "run", _interrupted)
    assert main(_ARGV[command]) == INTERRUPTED_EXIT_STATUS == 128 + signal.SIGINT
    assert capsys.readouterr().err == f"oellm {command}: error: interrupted\n"


class _ImportedWhileCtrlC(types.ModuleType):
    """A module whose names raise ``KeyboardInterrupt``: Ctrl-C while ``oellm convert`` imports it (torch, the
    conversion pipeline), before its own handling begins."""

    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt


@pytest.mark.parametrize("direction", ["hf-to-mcore", "mcore-to-hf"])
def test_ctrl_c_while_convert_starts_up_is_one_line(direction: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    for name in ("megatron.oellm.convert.to_mcore", "megatron.oellm.convert.to_hf"):
        monkeypatch.setitem(sys.modules, name, _ImportedWhileCtrlC(name))
    source = "--hf" if direction == "hf-to-mcore" else "--mcore"
    assert main(["convert", direction, "--model", "qwen3-30b-a3b-tiny", source, str(tmp_path / "in"),
                 "--out", str(tmp_path / "out")]) == INTERRUPTED_EXIT_STATUS
    assert capsys.readouterr().err == "oellm convert: error: interrupted\n"
    assert list(tmp_path.iterdir()) == []


def test_convert_still_removes_its_partial_output_and_keeps_the_previous_one(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture) -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    for name in ("hf", "hf2"):
        write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), tmp_path / name)
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    before = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    signal_at_layer_one(monkeypatch, "hf_to_mcore_unit", signal.SIGINT)
    with signal_handler(signal.SIGINT, signal.default_int_handler):
        assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf2"),
                     "--out", str(tmp_path / "mcore"), "--overwrite"]) == INTERRUPTED_EXIT_STATUS
    assert capsys.readouterr().err.splitlines() == [
        "oellm convert hf-to-mcore: error: stopped by SIGINT; the partial output was removed, --out is as it was"]
    assert {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "hf2", "mcore"]
