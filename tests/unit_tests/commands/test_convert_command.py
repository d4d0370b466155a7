"""``oellm convert``: both directions through the CLI, exit codes and messages."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.commands.convert import byte_size
from megatron.oellm.convert.safetensors_io import DEFAULT_MAX_SHARD_BYTES, SafetensorsSource
from tests.unit_tests.convert.convert_helpers import (
    assert_bitwise_equal,
    edit_json,
    random_hf_tensors,
    signal_at_layer_one,
    signal_handler,
    write_hf,
)


def test_cli_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    card = get_card("qwen3.5-35b-a3b-tiny")
    hf = random_hf_tensors(card, seed=7)
    write_hf(card, hf, tmp_path / "hf", DEFAULT_MAX_SHARD_BYTES)
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "mcore")]) == 0
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp_path / "mcore"),
                 "--out", str(tmp_path / "out"), "--max-shard-size", "1MB"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert_bitwise_equal(hf, dict(SafetensorsSource(tmp_path / "out")))


def test_cli_errors_exit_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The reason is on stderr as ``oellm convert DIRECTION: error: ...`` (the form of flops/recipe/table), and
    nothing is on stdout."""
    assert main(["convert", "hf-to-mcore", "--model", "no-such-model", "--hf", str(tmp_path),
                 "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("oellm convert hf-to-mcore: error: unknown model 'no-such-model'")
    assert main(["convert", "mcore-to-hf", "--model", "qwen3-30b-a3b-tiny", "--mcore", str(tmp_path / "missing"),
                 "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("oellm convert mcore-to-hf: error: ") and "is not a directory" in captured.err


def test_byte_size() -> None:
    assert byte_size("5GB") == 5 * 2**30
    assert byte_size("1024KB") == 2**20
    assert byte_size("1048576") == 2**20
    with pytest.raises(Exception, match="size like 5GB"):
        byte_size("five")


@pytest.mark.parametrize("text", ["0", "0GB", "0.4"])
def test_byte_size_of_nothing_is_refused(text: str) -> None:
    """A zero shard size would put every tensor in a file of its own."""
    with pytest.raises(argparse.ArgumentTypeError, match="below the 1MB minimum"):
        byte_size(text)


def test_cli_output_to_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = get_card("qwen3-30b-a3b-tiny")
    write_hf(card, random_hf_tensors(card, seed=8), tmp_path / "hf")
    (tmp_path / "mcore").mkdir()
    monkeypatch.chdir(tmp_path / "mcore")
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", "../hf", "--out", "."]) == 0
    assert (tmp_path / "mcore" / "latest_checkpointed_iteration.txt").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cli_hf_config_and_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--hf-config reaches the export; the report says where config.json came from."""
    card = get_card("qwen3-30b-a3b-tiny")
    write_hf(card, random_hf_tensors(card, seed=9), tmp_path / "hf")
    edit_json(tmp_path / "hf" / "config.json", eos_token_id=7)
    assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "mcore")]) == 0
    assert "kept config.json with the checkpoint for mcore-to-hf" in capsys.readouterr().out
    edit_json(tmp_path / "hf" / "config.json", eos_token_id=8)
    assert main(["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp_path / "mcore"),
                 "--out", str(tmp_path / "out"), "--hf-config", str(tmp_path / "hf")]) == 0
    assert f"config.json from --hf-config {tmp_path / 'hf'}" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eos_token_id"] == 8


def test_cli_sigterm_exits_with_the_signal_status(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One line and 128 + 15, as a shell reports a process ended by SIGTERM; nothing left behind."""
    card = get_card("qwen3-30b-a3b-tiny")
    write_hf(card, random_hf_tensors(card, seed=9), tmp_path / "hf")

    def not_handled(signum, frame):
        raise RuntimeError("SIGTERM reached the test's handler")

    signal_at_layer_one(monkeypatch, "hf_to_mcore_unit", signal.SIGTERM)
    with signal_handler(signal.SIGTERM, not_handled):
        assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf"),
                     "--out", str(tmp_path / "mcore")]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "oellm convert hf-to-mcore: error: stopped by SIGTERM; the partial output was removed, --out is as it was")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_cli_ctrl_c_exits_with_one_line_and_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C half-way: no traceback, 128 + 2, and no staging directory left beside --out. Python's own SIGINT
    handler is set for the test: a shell starts a background job (``pytest &``) with SIGINT ignored, which the
    conversion rightly leaves ignored."""
    card = get_card("qwen3-30b-a3b-tiny")
    write_hf(card, random_hf_tensors(card, seed=10), tmp_path / "hf")
    signal_at_layer_one(monkeypatch, "hf_to_mcore_unit", signal.SIGINT)
    with signal_handler(signal.SIGINT, signal.default_int_handler):
        assert main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp_path / "hf"),
                     "--out", str(tmp_path / "mcore")]) == 128 + signal.SIGINT
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "oellm convert hf-to-mcore: error: stopped by SIGINT; the partial output was removed, --out is as it was")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_cli_ctrl_c_before_staging_exits_with_one_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C before the conversion sets its handlers (a plain KeyboardInterrupt, while the card is looked up): 128 + 2
    and the one line on stderr."""
    from megatron.oellm import cards

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cards, "get_card", interrupted)
    assert main(["convert", "hf-to-mcore", "--model", "qwen3-30b-a3b-tiny", "--hf", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "mcore")]) == 128 + signal.SIGINT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "oellm convert hf-to-mcore: error: stopped by SIGINT; --out is as it was\n"
