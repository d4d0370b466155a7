"""``oellm convert mcore-to-hf --tokenizer DIR``: the per-checkpoint evaluation loop through the CLI (each export
over the last with ``--overwrite``), a refused folder as one error line with status 2, and the path flag's rules
(``~`` expanded, an empty value a usage error)."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import build_parser, main
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from tests.unit_tests.convert.convert_helpers import (
    assert_bitwise_equal,
    random_hf_tensors,
    save_tiny_tokenizer,
    write_hf,
)

CARD = "qwen3-30b-a3b-tiny"


def _export(mcore: Path, out: Path, *extra: str) -> list[str]:
    """The command line of ``mcore-to-hf`` from ``mcore`` into ``out``."""
    return ["convert", "mcore-to-hf", "--model", CARD, "--mcore", str(mcore), "--out", str(out), *extra]


def test_the_evaluation_loop_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from transformers import AutoTokenizer

    card = get_card(CARD)
    source = save_tiny_tokenizer(tmp_path / "tok", card.vocab_size, seed=random.randrange(2**31))
    for step in (1, 2):
        weights = random_hf_tensors(card, seed=random.randrange(2**31))
        write_hf(card, weights, tmp_path / f"hf{step}")
        assert main(["convert", "hf-to-mcore", "--model", CARD, "--hf", str(tmp_path / f"hf{step}"),
                     "--out", str(tmp_path / f"mcore{step}")]) == 0
        assert main(_export(tmp_path / f"mcore{step}", tmp_path / "eval", "--overwrite",
                            "--tokenizer", str(tmp_path / "tok"))) == 0
        assert_bitwise_equal(weights, dict(SafetensorsSource(tmp_path / "eval")))
        text = "".join(random.choices(string.printable, k=200))
        assert AutoTokenizer.from_pretrained(tmp_path / "eval")(text)["input_ids"] == source(text)["input_ids"]
    assert (f"  copied 2 tokenizer files from --tokenizer {tmp_path / 'tok'}: tokenizer_config.json, tokenizer.json"
            in capsys.readouterr().out.splitlines())


def test_a_refused_tokenizer_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "config.json").write_text("{}")
    assert main(_export(tmp_path / "mcore", tmp_path / "out", "--tokenizer", str(tmp_path / "tok"))) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"oellm convert mcore-to-hf: error: --tokenizer {tmp_path / 'tok'} is not a Hugging Face "
                            "tokenizer folder: it has no tokenizer_config.json and no tokenizer.json or "
                            "tokenizer.model or vocab.json (the files tokenizer.save_pretrained writes)\n")
    assert not (tmp_path / "out").exists()


def test_an_empty_tokenizer_path_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(_export(tmp_path / "mcore", tmp_path / "out", "--tokenizer="))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("oellm convert mcore-to-hf: error: argument --tokenizer: "
                                                        "empty path (an unset shell variable?); give a directory")


def test_a_leading_tilde_in_tokenizer_is_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    name = "".join(random.choices(string.ascii_lowercase, k=8))
    args = build_parser().parse_args(_export(Path("m"), Path("o"), f"--tokenizer=~/{name}"))
    assert args.tokenizer == tmp_path / "home" / name
    assert build_parser().parse_args(_export(Path("m"), Path("o"))).tokenizer is None


def test_help_describes_tokenizer(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["convert", "mcore-to-hf", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--tokenizer DIR copy the Hugging Face tokenizer files of this folder" in help_text
    assert "never the folder's config.json or weights" in help_text
